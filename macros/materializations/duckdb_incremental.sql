{#
    DuckDB: an incremental run of a per-trace model (macros/per_trace.sql)
    inserts the new traces' rows straight into the table, instead of
    dbt-duckdb's delete+insert, which first materialises them in a
    temporary table, deletes the target's rows of every trace_id found
    there, and copies them over.

    Why (measured, benchmarks/README.md): the per-trace model's query
    already selects only the traces the table has no row for
    (traces_pending() is "loaded and not in this"), so that delete matches
    nothing, and the copy is pure cost: at 256 ranks, adding one iteration
    (256 traces), the 11 per-trace models spent 2.5 s in the delete and
    copy and 0.9 s dropping temporary tables, beside 9.3 s computing their
    rows. Rows of unloaded traces still go in the model's post-hook
    (delete_unloaded_traces), inside the same transaction.

    This is right only for a model whose every row comes from a pending
    trace, i.e. whose query filters its inputs with the pending list: so
    the direct insert is taken only for a model that calls traces_pending(),
    traces_to_build() or traces_pending_where() (the pending traces that
    satisfy a condition) itself (dbt records the macros a model calls). A
    per-trace model without that filter keeps dbt-duckdb's delete+insert,
    which makes a rerun replace its rows rather than add them again.

    Everything else (a first build, --full-refresh, a model that is not
    per trace, a Python model) goes to dbt-duckdb's own incremental
    materialization unchanged. Its on_schema_change handling is skipped
    here: a changed model needs --full-refresh, which `tracehouse build`
    adds when the project changed. Spark: macros/materializations/spark_incremental.sql.
#}
{% materialization incremental, adapter='duckdb', supported_languages=['sql', 'python'] %}
    {%- set called = model['depends_on']['macros'] -%}
    {%- if config.get('incremental_strategy') == 'delete+insert'
        and config.get('unique_key') == 'trace_id'
        and model['language'] == 'sql'
        and ('macro.tracehouse.traces_pending' in called
             or 'macro.tracehouse.traces_to_build' in called
             or 'macro.tracehouse.traces_pending_where' in called)
        and builds_per_trace() -%}
        {{ return(insert_pending_traces()) }}
    {%- else -%}
        {{ return(dbt.materialization_incremental_duckdb()) }}
    {%- endif -%}
{% endmaterialization %}

{#- The body of an incremental run of a per-trace model on DuckDB: insert
    the query's rows by column name, then the post-hooks, in one
    transaction. -#}
{% macro insert_pending_traces() -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {{ run_hooks(pre_hooks, inside_transaction=False) }}
    {{ run_hooks(pre_hooks, inside_transaction=True) }}
    {% call statement('main') -%}
        insert into {{ target_relation }} by name
        select * from (
            {{ compiled_code }}
        ) as pending_rows
    {%- endcall %}
    {{ run_hooks(post_hooks, inside_transaction=True) }}
    {% do adapter.commit() %}
    {{ run_hooks(post_hooks, inside_transaction=False) }}
    {{ return({'relations': [target_relation]}) }}
{%- endmacro %}
