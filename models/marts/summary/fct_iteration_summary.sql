{#
    One row per run x iteration: the numbers a performance engineer reads
    first; `tracehouse compare` and the report's headline show them. Over
    the rank rows of fct_rank_iterations that have a step (the run's one
    timing source and step rule); a run without steps has one row with
    iteration NULL (each rank's whole trace). step_ns is the slowest rank's
    step (a synchronous job waits for it); every *_share is a ratio of sums
    over rank_step_total_ns (macro share_of_sums), so they add up to 1; the
    straggler is fct_stragglers' (rank 1 by waiting caused, NULL without
    waiting); worst_skew_* is the collective whose members started furthest
    apart; bubble_ratio is a ratio of sums over fct_pipeline_bubbles.
    Column definitions: _summary__models.yml. A small per-run
    table rebuilt each time.
#}

with

steps as (
    select
        run_id,
        rank,
        iteration,
        timing_source,
        step_rule,
        step_ns,
        step_compute_ns,
        step_overlap_ns,
        step_exposed_communication_ns,
        step_exposed_memory_ns,
        step_optimizer_ns,
        step_idle_ns,
        communication_ns,
        overlap_ns,
        row_number() over (
            partition by run_id, iteration order by step_ns desc, rank asc
        ) as slowness_order
    from {{ ref('fct_rank_iterations') }}
    where step_ns is not null
),

step_totals as (
    select
        run_id,
        iteration,
        max(timing_source) as timing_source,
        max(step_rule) as step_rule,
        count(distinct rank) as ranks,
        max(step_ns) as step_ns,
        cast(avg(step_ns) as bigint) as mean_step_ns,
        min(step_ns) as min_step_ns,
        cast(sum(step_ns) as bigint) as rank_step_total_ns,
        max(case when slowness_order = 1 then rank end) as slowest_rank,
        {{ step_part_shares() }},
        {{ share_of_sums('overlap_ns', 'communication_ns') }} as overlap_ratio
    from steps
    group by 1, 2
),

stragglers as (
    select
        run_id,
        iteration,
        rank as straggler_rank,
        wait_caused_ns as straggler_wait_caused_ns,
        times_last as straggler_times_last
    from {{ ref('fct_stragglers') }}
    where straggler_rank = 1
),

skews as (
    select
        run_id,
        iteration,
        start_skew_ns as worst_skew_ns,
        op as worst_skew_op,
        process_group_key as worst_skew_process_group,
        last_rank as worst_skew_last_rank
    from (
        select
            run_id,
            iteration,
            start_skew_ns,
            op,
            process_group_key,
            last_rank,
            row_number() over (
                partition by run_id, iteration order by start_skew_ns desc, collective_id asc
            ) as skew_order
        from {{ ref('fct_collectives') }}
        where iteration is not null and start_skew_ns is not null
    ) as ordered
    where skew_order = 1
),

bubbles as (
    select
        run_id,
        iteration,
        {{ share_of_sums('bubble_ns', 'group_span_ns') }} as bubble_ratio,
        {{ mean_in_value_order('theoretical_bubble_ratio') }} as theoretical_bubble_ratio
    from {{ ref('fct_pipeline_bubbles') }}
    group by 1, 2
),

final as (
    select
        step_totals.run_id,
        step_totals.iteration,
        step_totals.timing_source,
        step_totals.step_rule,
        step_totals.ranks,
        step_totals.step_ns,
        step_totals.mean_step_ns,
        step_totals.min_step_ns,
        step_totals.rank_step_total_ns,
        step_totals.slowest_rank,
        stragglers.straggler_rank,
        stragglers.straggler_wait_caused_ns,
        stragglers.straggler_times_last,
        skews.worst_skew_ns,
        skews.worst_skew_op,
        skews.worst_skew_process_group,
        skews.worst_skew_last_rank,
        step_totals.compute_share,
        step_totals.overlap_share,
        step_totals.exposed_communication_share,
        step_totals.exposed_memory_share,
        step_totals.optimizer_share,
        step_totals.idle_share,
        step_totals.overlap_ratio,
        bubbles.bubble_ratio,
        bubbles.theoretical_bubble_ratio
    from step_totals
    left join stragglers
        on
            step_totals.run_id = stragglers.run_id
            and step_totals.iteration is not distinct from stragglers.iteration
    left join skews
        on
            step_totals.run_id = skews.run_id
            and step_totals.iteration is not distinct from skews.iteration
    left join bubbles
        on
            step_totals.run_id = bubbles.run_id
            and step_totals.iteration is not distinct from bubbles.iteration
)

select * from final
