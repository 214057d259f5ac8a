{#
    One row per run x rank x iteration that has compute or communication
    islands: the length of (union of compute) intersected with (union of
    communication), by a sweep over island boundaries (macro sweep_overlap).

    Islands of one kind are disjoint (touching ones were merged), so each
    start adds 1 and each end subtracts 1 from that kind's open count; the
    time from one boundary to the next is overlap when both counts are open.
    Ties at one instant give zero-length segments, so their order does not
    change the sum.
    Incremental by run x rank x iteration (macros/incremental_traces.sql):
    a build recomputes only the iterations of ranks whose traces changed.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete('partition') }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

islands as (
    select
        run_id,
        rank,
        iteration,
        kind,
        start_ns,
        end_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where
        kind in ('compute', 'communication')
        and {{ incremental_traces_where('partition') }}
),

swept as (
    {{ sweep_overlap('islands', ['run_id', 'rank', 'iteration']) }}
),

final as (
    select * from swept
)

select * from final
