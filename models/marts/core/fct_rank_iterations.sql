{#
    One row per run x rank x iteration: where each rank's step time goes.
    The step (window, timing source, step rule) and its exclusive parts come
    from int_rank_steps_timed, decided once per run; Holistic Trace
    Analysis' span figures of the iteration's own kernels come beside them
    (NULL iteration: kernels launched outside every ProfilerStep of a trace
    that has steps, which have span figures but no step). Definitions in
    _core__models.yml; the unions come from int_kernel_intervals_merged, the
    overlap from int_rank_iterations_swept (both per trace, summed here:
    a rank's traces hold disjoint profiling windows). Rank coordinates from
    dim_ranks, so readers need no join.
    A table rebuilt each time from the per-trace tables.
#}

with

islands as (
    select
        run_id,
        rank,
        iteration,
        kind,
        start_ns,
        end_ns,
        busy_ns,
        interval_count
    from {{ ref('int_kernel_intervals_merged') }}
),

{# Overlap is swept per trace; a rank's traces hold disjoint windows. #}
overlap_totals as (
    select
        run_id,
        rank,
        iteration,
        cast(sum(overlap_ns) as bigint) as overlap_ns
    from {{ ref('int_rank_iterations_swept') }}
    group by 1, 2, 3
),

unions as (
    select
        run_id,
        rank,
        iteration,
        min(case when kind = 'all' then start_ns end) as first_start_ns,
        max(case when kind = 'all' then end_ns end) as last_end_ns,
        cast(sum(case when kind = 'all' then interval_count else 0 end) as bigint) as kernel_count,
        cast(sum(case when kind = 'all' then busy_ns else 0 end) as bigint) as busy_ns,
        cast(sum(case when kind = 'compute' then busy_ns else 0 end) as bigint) as compute_ns,
        cast(sum(case when kind = 'communication' then busy_ns else 0 end) as bigint)
            as communication_ns,
        cast(sum(case when kind = 'memory' then busy_ns else 0 end) as bigint) as memory_ns
    from islands
    group by 1, 2, 3
),

breakdown as (
    select
        unions.run_id,
        unions.rank,
        unions.iteration,
        unions.kernel_count,
        unions.first_start_ns,
        unions.last_end_ns,
        unions.last_end_ns - unions.first_start_ns as span_ns,
        unions.busy_ns,
        unions.compute_ns,
        unions.communication_ns,
        unions.memory_ns,
        coalesce(overlap_totals.overlap_ns, 0) as overlap_ns
    from unions
    left join overlap_totals
        on
            unions.run_id = overlap_totals.run_id
            and unions.rank = overlap_totals.rank
            and unions.iteration is not distinct from overlap_totals.iteration
),

span_figures as (
    select
        run_id,
        rank,
        iteration,
        kernel_count,
        first_start_ns,
        last_end_ns,
        span_ns,
        busy_ns,
        compute_ns,
        communication_ns,
        memory_ns,
        overlap_ns,
        communication_ns - overlap_ns as exposed_communication_ns,
        busy_ns - (compute_ns + communication_ns - overlap_ns) as exposed_memory_ns,
        span_ns - busy_ns as idle_ns,
        case
            when communication_ns > 0
                then cast(overlap_ns as double) / communication_ns
        end as overlap_ratio
    from breakdown
),

steps as (
    select * from {{ ref('int_rank_steps_timed') }}  -- noqa: AM04
),

ranks as (
    select
        run_id,
        rank,
        host_name,
        tp_rank,
        cp_rank,
        ep_rank,
        dp_rank,
        pp_stage,
        model_replica
    from {{ ref('dim_ranks') }}
),

final as (
    select
        coalesce(steps.run_id, span_figures.run_id) as run_id,
        coalesce(steps.rank, span_figures.rank) as rank,
        coalesce(steps.iteration, span_figures.iteration) as iteration,
        ranks.host_name,
        ranks.tp_rank,
        ranks.cp_rank,
        ranks.ep_rank,
        ranks.dp_rank,
        ranks.pp_stage,
        ranks.model_replica,
        steps.timing_source,
        steps.step_rule,
        steps.trace_id,
        steps.step_start_ns,
        steps.step_end_ns,
        steps.aligned_step_start_ns,
        steps.clock_offset_ns,
        steps.step_ns,
        steps.step_compute_ns,
        steps.step_overlap_ns,
        steps.step_exposed_communication_ns,
        steps.step_exposed_memory_ns,
        steps.step_optimizer_ns,
        steps.step_idle_ns,
        steps.cpu_step_start_ns,
        steps.cpu_step_ns,
        steps.gpu_lag_ns,
        cast(coalesce(span_figures.kernel_count, steps.kernel_count, 0) as bigint)
            as kernel_count,
        span_figures.first_start_ns,
        span_figures.last_end_ns,
        span_figures.span_ns,
        span_figures.busy_ns,
        span_figures.compute_ns,
        span_figures.communication_ns,
        span_figures.memory_ns,
        span_figures.overlap_ns,
        span_figures.exposed_communication_ns,
        span_figures.exposed_memory_ns,
        span_figures.idle_ns,
        span_figures.overlap_ratio
    from steps
    full outer join span_figures
        on
            steps.run_id = span_figures.run_id
            and steps.rank = span_figures.rank
            and steps.iteration is not distinct from span_figures.iteration
    left join ranks
        on
            coalesce(steps.run_id, span_figures.run_id) = ranks.run_id
            and coalesce(steps.rank, span_figures.rank) = ranks.rank
)

select * from final
