{#
    on-run-start: load every seed table that the warehouse lacks straight
    from its CSV, so `dbt run` (which never runs seeds) works on a fresh
    warehouse right after `tracehouse ingest`. Commands that run seeds
    themselves (`build`, `seed`) and `compile` (which reads no table) are left alone, and a seed table that
    exists is never touched: `dbt seed` refreshes edited CSVs as usual.
    Column types come from the seed's `column_types` config, as `dbt seed`
    would apply them; an empty CSV field is NULL, as for `dbt seed`.
#}
{% macro load_missing_seeds() -%}
    {%- if execute and invocation_args_dict.get('which') not in ('build', 'seed', 'compile') -%}
        {%- for node in graph.nodes.values()
            if node.resource_type == 'seed' and node.package_name == project_name -%}
            {%- set existing = adapter.get_relation(
                database=node.database, schema=node.schema, identifier=node.alias
            ) -%}
            {%- if existing is none -%}
                {%- set relation = api.Relation.create(
                    database=node.database, schema=node.schema, identifier=node.alias,
                    type='table',
                ) -%}
                {#- The seed's absolute path: dbt may run from another folder
                    (tracehouse runs it beside the database). -#}
                {%- set csv_path = node.root_path ~ '/' ~ node.original_file_path -%}
                {%- do log('loading missing seed ' ~ node.alias ~ ' from ' ~ csv_path, info=true) -%}
                {%- do run_query(create_seed_from_csv(relation, csv_path, node.config.column_types)) -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    select 1 as seeds_checked
{%- endmacro %}

{% macro create_seed_from_csv(relation, csv_path, column_types) -%}
    {{ return(adapter.dispatch('create_seed_from_csv', 'tracehouse')(relation, csv_path, column_types)) }}
{%- endmacro %}

{% macro default__create_seed_from_csv(relation, csv_path, column_types) -%}
    create schema if not exists {{ relation.without_identifier() }};
    create table {{ relation }} as
    select * from read_csv(
        '{{ csv_path }}',
        header = true,
        columns = {
            {%- for name, type in column_types.items() %}
            '{{ name }}': '{{ type }}'{{ "," if not loop.last }}
            {%- endfor %}
        }
    )
{%- endmacro %}

{#- Spark SQL runs one statement at a time: the schema and a view over the
    CSV first, then the table, cast to the seed's column types (Spark's CSV
    reader gives an empty field as NULL, as dbt seed does). -#}
{% macro spark__create_seed_from_csv(relation, csv_path, column_types) -%}
    {%- do run_query('create database if not exists ' ~ relation.schema) -%}
    {%- do run_query(
        'create or replace temporary view tracehouse_seed_csv using csv options (path '
        ~ spark_string_literal(csv_path) ~ ", header 'true')"
    ) -%}
    create table {{ relation }} using parquet as
    select
        {%- for name, type in column_types.items() %}
        cast(`{{ name }}` as {{ type }}) as `{{ name }}`{{ "," if not loop.last }}
        {%- endfor %}
    from tracehouse_seed_csv
{%- endmacro %}
