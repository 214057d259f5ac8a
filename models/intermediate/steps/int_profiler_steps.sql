{#
    One row per `ProfilerStep#N` range on a CPU track (trace_id, slice_id):
    the iteration N and its time window. The one place iterations are read
    from profiler steps.
    Incremental by trace (macros/incremental_traces.sql): a build computes
    the steps of new traces only and deletes those of unloaded ones.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete('trace') }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

slices as (
    select
        trace_id,
        slice_id,
        track_id,
        name,
        ts_ns,
        end_ns
    from {{ ref('stg_lake__slices') }}
    where {{ incremental_traces_where('trace') }}
),

threads as (
    select
        trace_id,
        track_id,
        is_gpu
    from {{ ref('stg_lake__threads') }}
    where {{ incremental_traces_where('trace') }}
),

cpu_steps as (
    select
        slices.trace_id,
        slices.slice_id,
        slices.name,
        slices.ts_ns,
        slices.end_ns
    from slices
    inner join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
    where
        not coalesce(threads.is_gpu, false)
        and {{ regex_matches('slices.name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
),

final as (
    select
        trace_id,
        slice_id,
        cast(
            substring(name, {{ var('profiler_step_prefix') | length + 1 }}) as bigint
        ) as step_number,
        ts_ns,
        end_ns
    from cpu_steps
)

select * from final
