{#
    One row per run x rank x iteration: the one step window every mart,
    chart and command uses, and its exclusive parts. The one place the
    timing source is decided: per run, `gpu` when any of its traces has a
    GPU step window (kernels), else `cpu` (ProfilerStep or Megatron step
    frames). Only windows of that source are kept, so the runs' ranks are
    timed alike.

    The step rule comes with the window (int_rank_steps_swept.step_rule).
    A rank with several traces for one iteration (only possible for the
    NULL iteration: traces without steps) gets their windows summed: its
    step_ns and every part are sums, step_start_ns the earliest start.
    cpu_step_start_ns / cpu_step_ns: the CPU window of the same trace and
    iteration, also on GPU-timed runs, so gpu_lag_ns (GPU step start - CPU
    step start) says how far the GPU runs behind the host.
    clock_offset_ns (int_rank_clock_offsets_estimated, 0 when none) puts the rank's
    step start on the run's reference clock (aligned_step_start_ns).
    A per-run table rebuilt each time (one row per rank and iteration).
#}

with

windows as (
    select
        run_id,
        rank,
        trace_id,
        timing_source,
        iteration,
        step_rule,
        kernel_count,
        step_start_ns,
        step_end_ns,
        step_ns,
        step_compute_ns,
        step_overlap_ns,
        step_exposed_communication_ns,
        step_exposed_memory_ns,
        step_optimizer_ns,
        step_idle_ns
    from {{ ref('int_rank_steps_swept') }}
),

run_sources as (
    select
        run_id,
        case when bool_or(timing_source = 'gpu') then 'gpu' else 'cpu' end as timing_source
    from windows
    group by 1
),

chosen as (
    select windows.*
    from windows
    inner join run_sources
        on
            windows.run_id = run_sources.run_id
            and windows.timing_source = run_sources.timing_source
),

cpu_windows as (
    select
        trace_id,
        iteration,
        step_start_ns as cpu_step_start_ns,
        step_ns as cpu_step_ns
    from windows
    where timing_source = 'cpu'
),

clock_offsets as (
    select
        run_id,
        rank,
        offset_ns
    from {{ ref('int_rank_clock_offsets_estimated') }}
),

per_rank as (
    select
        chosen.run_id,
        chosen.rank,
        chosen.iteration,
        max(chosen.timing_source) as timing_source,
        max(chosen.step_rule) as step_rule,
        count(*) as trace_count,
        min(chosen.trace_id) as trace_id,
        cast(sum(chosen.kernel_count) as bigint) as kernel_count,
        min(chosen.step_start_ns) as step_start_ns,
        max(chosen.step_end_ns) as step_end_ns,
        cast(sum(chosen.step_ns) as bigint) as step_ns,
        cast(sum(chosen.step_compute_ns) as bigint) as step_compute_ns,
        cast(sum(chosen.step_overlap_ns) as bigint) as step_overlap_ns,
        cast(sum(chosen.step_exposed_communication_ns) as bigint)
            as step_exposed_communication_ns,
        cast(sum(chosen.step_exposed_memory_ns) as bigint) as step_exposed_memory_ns,
        cast(sum(chosen.step_optimizer_ns) as bigint) as step_optimizer_ns,
        cast(sum(chosen.step_idle_ns) as bigint) as step_idle_ns,
        min(cpu_windows.cpu_step_start_ns) as cpu_step_start_ns,
        cast(sum(cpu_windows.cpu_step_ns) as bigint) as cpu_step_ns
    from chosen
    left join cpu_windows
        on
            chosen.trace_id = cpu_windows.trace_id
            and chosen.iteration = cpu_windows.iteration
    group by 1, 2, 3
),

final as (
    select
        per_rank.run_id,
        per_rank.rank,
        per_rank.iteration,
        per_rank.timing_source,
        per_rank.step_rule,
        per_rank.trace_id,
        per_rank.trace_count,
        per_rank.kernel_count,
        per_rank.step_start_ns,
        per_rank.step_end_ns,
        per_rank.step_ns,
        per_rank.step_compute_ns,
        per_rank.step_overlap_ns,
        per_rank.step_exposed_communication_ns,
        per_rank.step_exposed_memory_ns,
        per_rank.step_optimizer_ns,
        per_rank.step_idle_ns,
        per_rank.cpu_step_start_ns,
        per_rank.cpu_step_ns,
        case
            when per_rank.timing_source = 'gpu'
                then per_rank.step_start_ns - per_rank.cpu_step_start_ns
        end as gpu_lag_ns,
        coalesce(clock_offsets.offset_ns, 0) as clock_offset_ns,
        per_rank.step_start_ns + coalesce(clock_offsets.offset_ns, 0) as aligned_step_start_ns
    from per_rank
    left join clock_offsets
        on
            per_rank.run_id = clock_offsets.run_id
            and per_rank.rank = clock_offsets.rank
)

select * from final
