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
#}

{#- A predicate on `trace_id` selecting the traces this model must compute.
    A trace whose rows come out empty (e.g. a CPU-only trace in a kernel
    model) is computed again by the next build: cheap, since it has none of
    the rows the model looks for. -#}
{% macro traces_to_build(column='trace_id') -%}
    {#- dbt unit tests render the model as the unit test: they see the full query. -#}
    {%- if model.resource_type != 'unit_test' and is_incremental() -%}
        {{ column }} not in (select distinct built.trace_id from {{ this }} as built)
    {%- else -%}
        true
    {%- endif -%}
{%- endmacro %}

{#- Post-hook: drop the rows of traces no longer in the lake (unloaded, or
    the old version of a changed file). -#}
{% macro delete_unloaded_traces() -%}
    delete from {{ this }}
    where trace_id not in (
        select loaded.trace_id from {{ ref('stg_lake__traces') }} as loaded
    )
{%- endmacro %}
