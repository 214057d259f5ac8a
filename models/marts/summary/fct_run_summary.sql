{#
    One row per run: the report's headline numbers, over the run's
    fct_step_breakdown rows (its timing scope and step rule), its ranks
    and layout (dim_ranks) and its pipeline bubble (fct_pipeline_bubbles).

    Every run that has ranks, timings or pipeline bubbles gets a row;
    timing_source 'none' when it has neither kernels nor CPU step frames
    (then the timing columns are NULL and only the topology is known).
    Shares are ratios of sums over the scope's rank-iterations (a rank with
    longer steps weighs more), of span_ns: GPU first-to-last kernel of the
    iteration, CPU the step. mean_step_ns is the mean of step_ns over the
    rank-iterations (not rounded).
    bubble_ratio: sum of bubble_ns / sum of group_span_ns over the run's
    pipeline groups, iterations and stages (a ratio of sums, unlike
    fct_iteration_summary's mean of ratios).
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
        count(distinct rank) as timed_ranks,
        count(distinct iteration) as iterations,
        avg(step_ns) as mean_step_ns,
        sum(compute_ns) / nullif(sum(span_ns), 0) as compute_share,
        sum(exposed_communication_ns) / nullif(sum(span_ns), 0)
            as exposed_communication_share,
        sum(idle_ns) / nullif(sum(span_ns), 0) as idle_share,
        sum(overlap_ns) / nullif(sum(communication_ns), 0) as overlap_ratio,
        sum(comm_frames_ns) / nullif(sum(span_ns), 0) as comm_frames_share,
        sum(optimizer_ns) / nullif(sum(span_ns), 0) as optimizer_share
    from {{ ref('fct_step_breakdown') }}
    group by 1
),

bubbles as (
    select
        run_id,
        count(*) as bubble_rows,
        sum(bubble_ns) / nullif(sum(group_span_ns), 0) as bubble_ratio,
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
        coalesce(nullif(ranks.ranks, 0), steps.timed_ranks) as ranks,
        steps.timed_ranks,
        ranks.tp_size,
        ranks.cp_size,
        ranks.pp_size,
        ranks.dp_size,
        steps.iterations,
        steps.mean_step_ns,
        steps.compute_share,
        steps.exposed_communication_share,
        steps.idle_share,
        steps.overlap_ratio,
        steps.comm_frames_share,
        steps.optimizer_share,
        coalesce(bubbles.bubble_rows, 0) as bubble_rows,
        bubbles.bubble_ratio,
        bubbles.theoretical_bubble_ratio,
        bubbles.bubble_timing_sources
    from runs
    left join ranks
        on runs.run_id = ranks.run_id
    left join steps
        on runs.run_id = steps.run_id
    left join bubbles
        on runs.run_id = bubbles.run_id
)

select * from final
