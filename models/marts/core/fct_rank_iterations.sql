{#
    One row per run x rank x iteration: where each rank's step time goes.
    The step (window, timing source, step rule) and its exclusive parts come
    from int_rank_steps_timed, decided once per run; Holistic Trace
    Analysis' span figures of the iteration's own kernels come beside them
    from int_rank_iterations_measured (NULL iteration: kernels launched
    outside every ProfilerStep of a trace that has steps, which have span
    figures but no step). Definitions in _core__models.yml. Rank
    coordinates from dim_ranks, so readers need no join.
    A table rebuilt each time from the per-trace tables.
#}

with

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
        exposed_communication_ns,
        exposed_memory_ns,
        idle_ns,
        overlap_ratio
    from {{ ref('int_rank_iterations_measured') }}
),

steps as (
    select * from {{ ref('int_rank_steps_timed') }}  -- noqa: AM04
),

ranks as (
    select * from {{ ref('dim_ranks') }}  -- noqa: AM04
),

final as (
    select
        coalesce(steps.run_id, span_figures.run_id) as run_id,
        coalesce(steps.rank, span_figures.rank) as rank,
        coalesce(steps.iteration, span_figures.iteration) as iteration,
        {{ rank_coordinates('ranks') }},
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
