{#
    One row per run x rank x iteration in the run's timing scope: where
    each rank's step went, the rows every headline number, heatmap and
    run comparison is computed from (fct_run_summary, fct_rank_summary,
    fct_stage_summary aggregate them).

    Timing source, one per run: `gpu` when the run has kernels
    (fct_rank_iterations rows), else `cpu` when it has Megatron step frames
    timed on the CPU (fct_microbatch_phases, timing_source 'cpu'); a run
    with neither has no rows here.

    GPU rows: fct_rank_iterations of the run's traced iterations only,
    unless the run has none (then the NULL-iteration row of kernels outside
    every step is all there is). step_ns is the GPU step of fct_rank_steps
    (first kernel of step N to the first kernel of step N + 1: steps tile
    the GPU timeline), falling back to span_ns (first to last kernel of the
    iteration, which overlaps the next iteration when the GPU runs behind
    the CPU) where there is no GPU step. The shares are of span_ns.

    CPU rows: per rank and iteration of fct_microbatch_phases, step =
    first step-frame start to last step-frame end (span_ns = step_ns);
    compute = forward/backward/recompute frames; comm_frames = pp_p2p and
    dp_sync frames (waiting included); optimizer; other = the rest of the
    step (never negative).
    A per-run table rebuilt each time.
#}

with

rank_iterations as (
    select
        run_id,
        rank,
        iteration,
        span_ns,
        compute_ns,
        communication_ns,
        overlap_ns,
        exposed_communication_ns,
        exposed_memory_ns,
        idle_ns
    from {{ ref('fct_rank_iterations') }}
),

gpu_steps as (
    select
        run_id,
        rank,
        iteration,
        gpu_step_ns
    from {{ ref('fct_rank_steps') }}
    where iteration is not null
),

gpu_runs as (
    select
        run_id,
        max(case when iteration is not null then 1 else 0 end) as has_traced_iterations
    from rank_iterations
    group by 1
),

gpu as (
    select
        rank_iterations.run_id,
        rank_iterations.rank,
        rank_iterations.iteration,
        'gpu' as timing_source,
        coalesce(gpu_steps.gpu_step_ns, rank_iterations.span_ns) as step_ns,
        rank_iterations.span_ns,
        rank_iterations.compute_ns,
        rank_iterations.compute_ns - rank_iterations.overlap_ns as compute_only_ns,
        rank_iterations.overlap_ns,
        rank_iterations.communication_ns,
        rank_iterations.exposed_communication_ns,
        rank_iterations.exposed_memory_ns,
        rank_iterations.idle_ns,
        cast(null as bigint) as comm_frames_ns,
        cast(null as bigint) as optimizer_ns,
        cast(null as bigint) as other_ns
    from rank_iterations
    inner join gpu_runs
        on rank_iterations.run_id = gpu_runs.run_id
    left join gpu_steps
        on
            rank_iterations.run_id = gpu_steps.run_id
            and rank_iterations.rank = gpu_steps.rank
            and rank_iterations.iteration = gpu_steps.iteration
    where
        rank_iterations.iteration is not null
        or gpu_runs.has_traced_iterations = 0
),

cpu_phases as (
    select
        phases.run_id,
        phases.rank,
        phases.iteration,
        phases.phase,
        phases.first_start_ns,
        phases.last_end_ns,
        phases.busy_ns
    from {{ ref('fct_microbatch_phases') }} as phases
    left join gpu_runs
        on phases.run_id = gpu_runs.run_id
    where phases.timing_source = 'cpu' and gpu_runs.run_id is null
),

cpu_totals as (
    select
        run_id,
        rank,
        iteration,
        cast(max(last_end_ns) - min(first_start_ns) as bigint) as step_ns,
        cast(coalesce(sum(
            case when phase in ('forward', 'backward', 'recompute') then busy_ns end
        ), 0) as bigint) as compute_ns,
        cast(coalesce(sum(
            case when phase in ('pp_p2p', 'dp_sync') then busy_ns end
        ), 0) as bigint) as comm_frames_ns,
        cast(coalesce(sum(
            case when phase = 'optimizer' then busy_ns end
        ), 0) as bigint) as optimizer_ns
    from cpu_phases
    group by 1, 2, 3
),

cpu as (
    select
        run_id,
        rank,
        iteration,
        'cpu' as timing_source,
        step_ns,
        step_ns as span_ns,
        compute_ns,
        cast(null as bigint) as compute_only_ns,
        cast(null as bigint) as overlap_ns,
        cast(null as bigint) as communication_ns,
        cast(null as bigint) as exposed_communication_ns,
        cast(null as bigint) as exposed_memory_ns,
        cast(null as bigint) as idle_ns,
        comm_frames_ns,
        optimizer_ns,
        greatest(step_ns - compute_ns - comm_frames_ns - optimizer_ns, 0) as other_ns
    from cpu_totals
),

final as (
    select * from gpu
    union all
    select * from cpu
)

select * from final
