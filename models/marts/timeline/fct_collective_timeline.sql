{#
    One row per rank's part in a collective instance (run_id, collective_id,
    rank), with only what a timeline draws of it (its rank, iteration, the
    call it links, when it arrived and ended on the reference clock, its
    place in the arrival order and its wait), written in the order a
    timeline reads it: run, iteration, rank.

    Why a table of its own beside fct_collective_ranks: that mart lies in
    no order (its rows come out of the members' windows by collective), so
    the timeline's question "the members of these ranks' collectives in
    this window" read every row group of it and joined them all to the
    shown kernels: 171 of the 177 ms a pipeline group's first view took at
    1,024 ranks x 4 iterations. Here the zone maps skip the row groups of
    other iterations and, within one, of ranks out of the selection's
    range. The figures are int_collective_members_aligned's, unchanged, as
    fct_collective_ranks shows them (tests/test_models_timeline.py checks
    that both hold the same rows).
#}

with

calls as (
    select
        run_id,
        rank,
        iteration,
        collective_id,
        device,
        trace_id,
        slice_id,
        op,
        process_group_key,
        arrival_ns,
        end_ns,
        arrival_order,
        is_last,
        wait_ns
    from {{ ref('int_collective_members_aligned') }}
),

final as (
    select * from calls
)

select * from final
-- run_id, iteration (NULL last), rank: the order fct_kernel_timeline is stored in.
order by 1, 3 nulls last, 2
