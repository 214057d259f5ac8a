{#
    One row per run x rank x iteration x trace that has compute or
    communication islands: the length of (union of compute) intersected
    with (union of communication), by a sweep over island boundaries (macro
    sweep_overlap).

    Islands of one kind are disjoint (touching ones were merged), so each
    start adds 1 and each end subtracts 1 from that kind's open count; the
    time from one boundary to the next is overlap when both counts are open.
    Ties at one instant give zero-length segments, so their order does not
    change the sum.
    Per trace (materialized per_trace, keyed by trace_id), as the
    islands it sweeps; fct_rank_iterations sums a rank's traces.
#}

with

islands as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        kind,
        start_ns,
        end_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where
        kind in ('compute', 'communication')
        and {{ trace_filter(traces_pending()) }}
),

swept as (
    {{ sweep_overlap('islands', ['run_id', 'rank', 'trace_id', 'iteration']) }}
),

final as (
    select * from swept
)

select * from final
