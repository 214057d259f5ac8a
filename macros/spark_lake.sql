{#
    The lake as a dbt source on every target. DuckDB reads the Parquet
    files in place (lake_source in macros/lake_scan.sql). Spark
    needs tables: `register_lake()`, an on-run-start hook, (re)creates each
    table of the `lake` source as an external Parquet table of schema `lake`
    over `<lake_root>/<table>/`:
      - its columns come from the table's `_common_metadata` (a Parquet
        summary file ingest writes beside `_empty.parquet`: Spark reads the
        schema from it first, so a table no trace has rows for yet still has
        every column);
      - recursiveFileLookup: files are found under `run=<run>/` without
        Spark's hive partition discovery (`run_id` is a real column);
      - Spark lists no file whose name starts with `.` or `_` (summary files
        aside), so ingest's hidden temporaries (`.<name>.<token>.tmp`) and
        `_empty.parquet` add no rows;
      - columns are matched by name: a file missing a column reads NULL for
        it, as DuckDB's union_by_name.
    Dropping an external table leaves its files alone; re-creating it each
    run means every build lists the lake afresh.
#}
{% macro register_lake() -%}
    {{ return(adapter.dispatch('register_lake', 'tracehouse')()) }}
{%- endmacro %}

{% macro default__register_lake() -%}
    select 1 as lake_registered
{%- endmacro %}

{% macro spark__register_lake() -%}
    {#- `compile` reads no table: no Spark session is started for it. -#}
    {%- if execute and invocation_args_dict.get('which') != 'compile' -%}
        {%- set root = lake_root() -%}
        {%- do run_query('create database if not exists lake') -%}
        {%- for node in graph.sources.values()
            if node.source_name == 'lake' and node.package_name == project_name -%}
            {%- do run_query('drop table if exists lake.' ~ node.name) -%}
            {%- do run_query(
                'create table lake.' ~ node.name ~ ' using parquet '
                ~ "options (recursiveFileLookup 'true') "
                ~ 'location ' ~ spark_string_literal(root ~ '/' ~ node.name)
            ) -%}
        {%- endfor -%}
    {%- endif -%}
    select 1 as lake_registered
{%- endmacro %}

{#- A Spark SQL string literal. The spark target reads literals verbatim
    (spark.sql.parser.escapedStringLiterals, as DuckDB), which leaves no
    way to write a single quote: such a path is refused, naming it. -#}
{% macro spark_string_literal(text) -%}
    {%- if "'" in text -%}
        {{ exceptions.raise_compiler_error(
            "the spark target cannot read a lake whose path holds a single quote: " ~ text
            ~ " (move or link the warehouse to a path without one)") }}
    {%- endif -%}
    {{ return("'" ~ text ~ "'") }}
{%- endmacro %}
