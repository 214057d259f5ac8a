{#
    `per_trace`: the materialization of a per-trace model (macros/per_trace.sql),
    declared per folder in dbt_project.yml (`+materialized: per_trace`).

    DuckDB: when the model's table exists and the build is no full refresh,
    the model's query selects only the traces the table has no rows for
    (traces_pending()), so its rows are inserted straight into the table,
    then the rows of unloaded traces deleted, in one transaction. Otherwise
    (first build, --full-refresh, a table dropped because its model changed:
    tracehouse/build/state.py) the table is built whole by dbt-duckdb's own
    table materialization (a new table swapped in for the old one).

    Why not dbt-duckdb's incremental `delete+insert` (measured,
    benchmarks/README.md): it materialises the new rows in a temporary
    table, deletes the target's rows of every trace_id found there (none:
    the query already left those traces out) and copies them over: at 256
    ranks, adding one iteration (256 traces), the 11 per-trace models spent
    2.5 s in the delete and copy and 0.9 s dropping temporary tables,
    beside 9.3 s computing their rows.

    A per_trace model must filter its inputs with
    trace_filter(traces_pending()): a model that does not would insert its
    every trace again, so it is refused here, naming the model.

    Spark: dbt-spark has no row-level delete on Parquet tables (merge needs
    Delta, Iceberg or Hudi; a trace-partitioned table of 4,096 ranks x
    iterations files per model would cost more to list than to rebuild), so
    a per_trace model is a plain Parquet table rebuilt each time.
#}
{% materialization per_trace, adapter='duckdb', supported_languages=['sql'] %}
    {%- if 'macro.tracehouse.traces_pending' not in model['depends_on']['macros'] -%}
        {{ exceptions.raise_compiler_error(
            "model " ~ model['name'] ~ " (" ~ model['original_file_path'] ~ ") is materialized "
            ~ "per_trace but never calls traces_pending(): filter every input with "
            ~ "trace_filter(traces_pending(), '<alias>.trace_id') (macros/per_trace.sql), "
            ~ "or give the model another materialization") }}
    {%- endif -%}
    {%- if not builds_per_trace() -%}
        {{ return(dbt.materialization_table_duckdb()) }}
    {%- endif -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {{ run_hooks(pre_hooks, inside_transaction=False) }}
    {{ run_hooks(pre_hooks, inside_transaction=True) }}
    {% call statement('main') -%}
        insert into {{ target_relation }} by name
        select * from (
            {{ compiled_code }}
        ) as pending_rows
    {%- endcall %}
    {% call statement('delete_unloaded_traces') -%}
        {{ delete_unloaded_traces() }}
    {%- endcall %}
    {{ run_hooks(post_hooks, inside_transaction=True) }}
    {% do adapter.commit() %}
    {{ run_hooks(post_hooks, inside_transaction=False) }}
    {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}

{% materialization per_trace, adapter='spark' %}
    {{ return(materialization_table_spark()) }}
{% endmaterialization %}
