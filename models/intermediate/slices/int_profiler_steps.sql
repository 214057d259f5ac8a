{#
    One row per `ProfilerStep#N` range on a CPU track (trace_id, slice_id):
    the iteration N and its time window. The one place iterations are read
    from profiler steps (int_slices_contextualized applies them). A CPU
    track is one whose slices are not `is_gpu` (ingest/slice_context.py); a
    track without a thread row counts as CPU (every parser writes one).
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

{# ProfilerStep ranges on CPU tracks (is_gpu: ingest/slice_context.py).
   The prefix test first: DuckDB pushes it into the Parquet scan, which then
   reads the other columns of those few rows only (0.58 s against 0.70 s
   at 256 ranks x 2 iterations). The prefix is a literal: a `%` or `_` in
   var('profiler_step_prefix') would be a LIKE wildcard, which the regular
   expression after it then narrows again. #}
cpu_steps as (
    select
        trace_id,
        slice_id,
        name,
        ts_ns,
        end_ns
    from {{ lake_scan('slices', pending) }}
    where
        name like '{{ var('profiler_step_prefix') | replace("'", "''") }}%'
        and {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
        and not is_gpu
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
