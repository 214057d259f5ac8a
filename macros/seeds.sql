{#
    on-run-start: load seed tables straight from their CSVs when the
    invocation does not run the seed nodes itself, so `dbt run` (which never
    runs seeds) works on a fresh warehouse right after `tracehouse ingest`,
    and a plain `tracehouse build` needs no seed nodes (it leaves them out:
    tracehouse/build/dbt.py, PLAIN_BUILD_EXCLUDES).
    Which seeds: every one the warehouse lacks and, on --full-refresh, every
    one (`tracehouse build` drops the table of a seed whose CSV or config
    changed since the last build, tracehouse/build/stale.py, so an edited
    seed is reloaded exactly when it can differ). A seed the invocation selects (`dbt seed`, plain `dbt
    build`) is left to dbt, and `compile` reads no table.
    Why not dbt's seed nodes in a plain build: 13 seed nodes and their 13
    row checks cost ~1.5 CPU s of per-node work on every build whatever the
    lake (benchmarks/README.md, "Where a full build's time goes"); one
    read_csv per seed here costs milliseconds, and an unchanged warehouse
    loads nothing.
    Column types come from the seed's `column_types` config, as `dbt seed`
    would apply them; an empty CSV field is NULL, as for `dbt seed`.
#}
{% macro load_missing_seeds() -%}
    {%- if execute and invocation_args_dict.get('which') != 'compile' -%}
        {%- set loaded = {'missing': [], 'reloaded': []} -%}
        {%- for node in graph.nodes.values()
            if node.resource_type == 'seed' and node.package_name == project_name
            and node.unique_id not in selected_resources -%}
            {%- set existing = adapter.get_relation(
                database=node.database, schema=node.schema, identifier=node.alias
            ) -%}
            {%- if existing is none or flags.FULL_REFRESH -%}
                {%- set relation = api.Relation.create(
                    database=node.database, schema=node.schema, identifier=node.alias,
                    type='table',
                ) -%}
                {#- The seed's absolute path: dbt may run from another folder
                    (tracehouse runs it beside the database). -#}
                {%- set csv_path = node.root_path ~ '/' ~ node.original_file_path -%}
                {%- do loaded['missing' if existing is none else 'reloaded'].append(node.alias) -%}
                {%- if existing is not none -%}
                    {%- do adapter.drop_relation(existing) -%}
                {%- endif -%}
                {%- do run_query(create_seed_from_csv(relation, csv_path, node.config.column_types)) -%}
            {%- endif -%}
        {%- endfor -%}
        {%- for kind, names in loaded.items() if names -%}
            {%- do log(('loading missing seed' if kind == 'missing' else 'reloading seed')
                       ~ ('s' if names | length > 1 else '') ~ ' from seeds/: '
                       ~ names | join(', '), info=true) -%}
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
