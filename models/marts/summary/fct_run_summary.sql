{#
    One row per run: the report's headline numbers over all its iterations,
    from fct_rank_iterations' rows that have a step (the run's one timing
    source and step rule), its ranks and layout (dim_ranks), its pipeline
    bubble (fct_pipeline_bubbles) and its straggler (fct_stragglers).

    Every run that has ranks, timings or pipeline bubbles gets a row;
    timing_source 'none' when it has no step (then the timing columns are
    NULL and only the topology is known).
    mean_step_ns: the mean over iterations of fct_iteration_summary.step_ns
    (the slowest rank's step, what the job waits for); mean_rank_step_ns
    the mean over rank-iterations. *_share: each exclusive part of the step
    summed over the run's rank-iterations over their summed steps (macro
    share_of_sums, ratios of sums): they add up to 1, and equal the ones
    recomputed from fct_iteration_summary's rows weighted by
    rank_step_total_ns. overlap_ratio: Holistic Trace Analysis'
    overlapped / all communication, summed over the same rows.
    straggler_rank: the rank whose late arrivals cost the others the most
    waiting over the run (fct_stragglers.wait_caused_ns summed over
    iterations; NULL when nobody caused any).
    bubble_ratio: sum of bubble_ns / sum of group_span_ns over the run's
    pipeline groups, iterations and stages.
    A per-run table rebuilt each time.
#}

with

ranks as (
    select
        run_id,
        count(*) as ranks,
        max(tp_rank) + 1 as tp_size,
        max(cp_rank) + 1 as cp_size,
        max(pp_stage) + 1 as pp_size,
        max(dp_rank) + 1 as dp_size
    from {{ ref('dim_ranks') }}
    where coalesce(has_trace, true)
    group by 1
),

steps as (
    select
        run_id,
        max(timing_source) as timing_source,
        max(step_rule) as step_rule,
        count(distinct rank) as timed_ranks,
        cast(sum(step_ns) as bigint) as rank_step_total_ns,
        avg(step_ns) as mean_rank_step_ns,
        {{ step_part_shares() }},
        {{ share_of_sums('overlap_ns', 'communication_ns') }} as overlap_ratio
    from {{ ref('fct_rank_iterations') }}
    where step_ns is not null
    group by 1
),

iterations as (
    select
        run_id,
        count(*) as iterations,
        avg(step_ns) as mean_step_ns
    from {{ ref('fct_iteration_summary') }}
    group by 1
),

waiting as (
    select
        run_id,
        rank,
        cast(sum(wait_caused_ns) as bigint) as wait_caused_ns,
        row_number() over (
            partition by run_id
            order by sum(wait_caused_ns) desc, sum(times_last) desc, rank asc
        ) as wait_order
    from {{ ref('fct_stragglers') }}
    group by 1, 2
),

stragglers as (
    select
        run_id,
        rank as straggler_rank,
        wait_caused_ns as straggler_wait_caused_ns
    from waiting
    where wait_order = 1 and wait_caused_ns > 0
),

bubbles as (
    select
        run_id,
        count(*) as bubble_rows,
        {{ share_of_sums('bubble_ns', 'group_span_ns') }} as bubble_ratio,
        {{ mean_in_value_order('theoretical_bubble_ratio') }} as theoretical_bubble_ratio,
        {{ string_agg_ordered('timing_source', "', '", 'timing_source', distinct=true) }}
            as bubble_timing_sources
    from {{ ref('fct_pipeline_bubbles') }}
    group by 1
),

runs as (
    select run_id from ranks
    union
    select run_id from steps
    union
    select run_id from bubbles
),

final as (
    select
        runs.run_id,
        coalesce(steps.timing_source, 'none') as timing_source,
        steps.step_rule,
        coalesce(nullif(ranks.ranks, 0), steps.timed_ranks) as ranks,
        steps.timed_ranks,
        ranks.tp_size,
        ranks.cp_size,
        ranks.pp_size,
        ranks.dp_size,
        iterations.iterations,
        iterations.mean_step_ns,
        steps.mean_rank_step_ns,
        steps.rank_step_total_ns,
        steps.compute_share,
        steps.overlap_share,
        steps.exposed_communication_share,
        steps.exposed_memory_share,
        steps.optimizer_share,
        steps.idle_share,
        steps.overlap_ratio,
        stragglers.straggler_rank,
        stragglers.straggler_wait_caused_ns,
        coalesce(bubbles.bubble_rows, 0) as bubble_rows,
        bubbles.bubble_ratio,
        bubbles.theoretical_bubble_ratio,
        bubbles.bubble_timing_sources
    from runs
    left join ranks
        on runs.run_id = ranks.run_id
    left join steps
        on runs.run_id = steps.run_id
    left join iterations
        on runs.run_id = iterations.run_id
    left join stragglers
        on runs.run_id = stragglers.run_id
    left join bubbles
        on runs.run_id = bubbles.run_id
)

select * from final
