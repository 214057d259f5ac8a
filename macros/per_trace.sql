{#
    Incremental builds by trace, with dbt's own `delete+insert` strategy.

    The unit of change is the trace: ingest gives every loaded file a
    trace_id derived from its content, so a changed file is a new trace_id
    plus an unloaded old one. A per-trace model (a model whose every row
    depends on one trace only) is configured as

        materialized='incremental', incremental_strategy='delete+insert',
        unique_key='trace_id', post_hook="{{ delete_unloaded_traces() }}"

    and filters its input with `traces_to_build()`: on an incremental run
    the traces it has no rows for yet, else all. Per-run lookups (process
    groups, vpp chunks) and aggregates are plain tables rebuilt each time,
    so nothing here tracks context. A change of model code, seeds or vars
    needs `--full-refresh` (`tracehouse build` detects it and adds it).

    On Spark (target `spark`) dbt-spark offers no delete+insert for Parquet
    tables, so macros/spark_incremental.sql builds a `delete+insert` model as
    a plain table (every trace, every build): `traces_to_build()` is then
    `true` and `delete_unloaded_traces()` a no-op. Spark's strength is the
    full rebuild spread over a cluster; per-trace increments pay off on one
    machine, where DuckDB runs.
#}

{#- Whether this model computes only the traces it lacks (DuckDB's
    delete+insert), not every trace (a full rebuild, Spark). -#}
{% macro builds_per_trace() -%}
    {{ return(adapter.dispatch('builds_per_trace', 'tracehouse')()) }}
{%- endmacro %}

{% macro default__builds_per_trace() -%}
    {{ return(model.resource_type != 'unit_test' and is_incremental()) }}
{%- endmacro %}

{% macro spark__builds_per_trace() -%}
    {{ return(false) }}
{%- endmacro %}

{#- A predicate on `trace_id` selecting the traces this model must compute.
    A trace whose rows come out empty (e.g. a CPU-only trace in a kernel
    model) is computed again by the next build: cheap, since it has none of
    the rows the model looks for. -#}
{% macro traces_to_build(column='trace_id') -%}
    {#- dbt unit tests render the model as the unit test: they see the full query. -#}
    {%- if builds_per_trace() -%}
        {{ column }} not in (select distinct built.trace_id from {{ this }} as built)
    {%- else -%}
        true
    {%- endif -%}
{%- endmacro %}

{#- Post-hook: drop the rows of traces no longer in the lake (unloaded, or
    the old version of a changed file). -#}
{% macro delete_unloaded_traces() -%}
    {#- ref() outside the condition, so dbt sees the dependency at parse time. -#}
    {%- set loaded_traces = ref('stg_lake__traces') -%}
    {%- if builds_per_trace() -%}
    delete from {{ this }}
    where trace_id not in (
        select loaded.trace_id from {{ loaded_traces }} as loaded
    )
    {%- endif -%}
{%- endmacro %}
