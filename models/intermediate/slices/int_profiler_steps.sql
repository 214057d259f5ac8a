{#
    One row per `ProfilerStep#N` range on a CPU track (trace_id, slice_id):
    the iteration N and its time window. The one place iterations are read
    from profiler steps (int_slices_contextualized applies them). A profiler
    step is an annotation range (ingest marks every complete CPU slice
    named `ProfilerStep#N` as one, whatever its category:
    ingest/annotation_context.py), so the steps are read from
    int_annotation_ranges_nested, a few rows per trace, not from the lake's
    every slice (0.58 s of a full build at 256 ranks x 2 iterations).
    Per trace (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{#- The traces to compute, read once for every scan, whose files are read by
    name (macros/per_trace.sql, macros/lake_scan.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

{# The prefix is a literal: a `%` or `_` in var('profiler_step_prefix')
   would be a LIKE wildcard, which the regular expression after it then
   narrows again. #}
cpu_steps as (
    select
        trace_id,
        slice_id,
        name,
        ts_ns,
        end_ns
    from {{ ref('int_annotation_ranges_nested') }}
    where
        name like '{{ var('profiler_step_prefix') | replace("'", "''") }}%'
        and {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
        and {{ new_traces }}
),

final as (
    select
        trace_id,
        slice_id,
        cast(
            substring(name, {{ var('profiler_step_prefix') | length + 1 }}) as bigint
        ) as step_number,
        ts_ns,
        end_ns,
        least(
            end_ns,
            coalesce(
                lead(ts_ns) over (partition by trace_id order by ts_ns, slice_id),
                end_ns
            )
        ) as window_end_ns
    from cpu_steps
)

select * from final
