{#
    drop_retired_models(): drop the tables and views a retired model left
    in the warehouse. dbt never drops a relation whose model was removed
    or renamed, so a warehouse built before the change kept answering
    with the old mart (fct_rank_steps, fct_step_breakdown) beside the new
    one: two answers to one question. Run as an on-run-end hook on DuckDB:
    a relation in one of the project's schemas, named like a project model
    (stg_, int_, fct_, dim_), that no model, seed or snapshot of the graph
    builds is dropped, and the hook says which. Other names are left alone
    (a user's own tables). A disabled model is not in the graph either, so
    a build that leaves the what-if models out (`--vars '{whatif: false}'`,
    dbt_project.yml) drops the tables an earlier build made of them, which
    would otherwise answer with a stale replay; the next build without the
    var builds them again. The hook's own statement is a one-row select,
    as the other hooks' are.
#}
{% macro drop_retired_models() -%}
    {%- if execute and target.type == 'duckdb' and flags.WHICH in ('build', 'run') -%}
        {%- set known = [] -%}
        {%- set schemas = [] -%}
        {%- for node in graph.nodes.values()
            if node.resource_type in ('model', 'seed', 'snapshot') -%}
            {%- do known.append(node.schema | lower ~ '.' ~ (node.alias or node.name) | lower) -%}
            {%- if node.schema | lower not in schemas -%}
                {%- do schemas.append(node.schema | lower) -%}
            {%- endif -%}
        {%- endfor -%}
        {%- set listing -%}
            select table_schema, table_name, table_type
            from information_schema.tables
            where
                table_catalog = current_database()
                and lower(table_schema) in (
                    {%- for schema in schemas -%}
                        '{{ schema }}'{{ ', ' if not loop.last }}
                    {%- endfor -%}
                )
                and regexp_matches(table_name, '^(stg|int|fct|dim)_')
        {%- endset -%}
        {%- for row in run_query(listing).rows
            if (row[0] | lower ~ '.' ~ row[1] | lower) not in known -%}
            {%- set kind = 'view' if row[2] == 'VIEW' else 'table' -%}
            {%- do run_query('drop ' ~ kind ~ ' if exists "' ~ row[0] ~ '"."' ~ row[1] ~ '"') -%}
            {%- do log('dropped ' ~ row[0] ~ '.' ~ row[1] ~ ': no model builds it any more',
                       info=true) -%}
        {%- endfor -%}
    {%- endif %}
    select 1 as retired_models_checked
{%- endmacro %}
