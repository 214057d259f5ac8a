{#
    One row per run x rank x iteration: the step as the CPU ran it and as
    the GPU ran it.

    CPU step: the `ProfilerStep#N` range (int_profiler_steps); on a trace
    without profiler steps, first start to last end of the iteration's
    Megatron step frames (int_cpu_steps_classified). cpu_step_source says
    which.
    GPU-projected step: from the first kernel (earliest start) launched in
    step N to the first kernel launched in step N + 1 of the same trace;
    the trace's last step ends with the end of its last kernel. So the GPU
    steps of a trace tile its kernel timeline without overlapping, unlike
    fct_rank_iterations.span_ns (first to last kernel of the iteration),
    which overlaps the next iteration's span whenever the GPU runs behind
    the CPU. "Step time" in charts is gpu_step_ns (cpu_step_ns on CPU-only
    runs). gpu_lag_ns = GPU step start - CPU step start: how far the GPU
    runs behind the host.
    gpu_busy_ns = length of the union of the iteration's own kernels
    (int_kernel_intervals_merged, kind `all`, as fct_rank_iterations).
    Kernels outside every ProfilerStep (NULL iteration) start no step.
    clock_offset_ns (int_rank_clock_offsets, 0 when none) puts the rank's
    step starts on the run's reference clock (aligned_*_start_ns), so ranks
    on hosts with different clocks line up; durations need no correction.
#}

with

traces as (
    select
        run_id,
        rank,
        trace_id
    from {{ ref('int_traces') }}
),

profiler_steps as (
    select
        trace_id,
        step_number as iteration,
        ts_ns,
        end_ns
    from {{ ref('int_profiler_steps') }}
),

step_frames as (
    select
        trace_id,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where
        iteration is not null
        and trace_id not in (select profiler_steps.trace_id from profiler_steps)
),

kernels as (
    select
        trace_id,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where iteration is not null
),

busy as (
    select
        trace_id,
        iteration,
        sum(busy_ns) as gpu_busy_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where kind = 'all' and iteration is not null
    group by 1, 2
),

cpu_steps as (
    select
        trace_id,
        iteration,
        'profiler_step' as cpu_step_source,
        ts_ns as cpu_step_start_ns,
        end_ns as cpu_step_end_ns
    from profiler_steps
    union all
    select
        trace_id,
        iteration,
        'megatron_frames' as cpu_step_source,
        min(ts_ns) as cpu_step_start_ns,
        max(end_ns) as cpu_step_end_ns
    from step_frames
    group by 1, 2
),

gpu_iterations as (
    select
        trace_id,
        iteration,
        count(*) as kernel_count,
        min(ts_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from kernels
    group by 1, 2
),

gpu_steps as (
    select
        trace_id,
        iteration,
        kernel_count,
        first_start_ns as gpu_step_start_ns,
        coalesce(
            lead(first_start_ns) over (partition by trace_id order by iteration),
            last_end_ns
        ) as gpu_step_end_ns,
        lead(first_start_ns) over (partition by trace_id order by iteration) is null
            as is_last_gpu_step
    from gpu_iterations
),

steps as (
    select
        coalesce(cpu_steps.trace_id, gpu_steps.trace_id) as trace_id,
        coalesce(cpu_steps.iteration, gpu_steps.iteration) as iteration,
        cpu_steps.cpu_step_source,
        cpu_steps.cpu_step_start_ns,
        cpu_steps.cpu_step_end_ns,
        gpu_steps.kernel_count,
        gpu_steps.gpu_step_start_ns,
        gpu_steps.gpu_step_end_ns,
        gpu_steps.is_last_gpu_step
    from cpu_steps
    full outer join gpu_steps
        on
            cpu_steps.trace_id = gpu_steps.trace_id
            and cpu_steps.iteration = gpu_steps.iteration
),

clock_offsets as (
    select
        run_id,
        rank,
        offset_ns
    from {{ ref('int_rank_clock_offsets') }}
),

final as (
    select
        traces.run_id,
        traces.rank,
        steps.iteration,
        steps.trace_id,
        steps.cpu_step_source,
        steps.cpu_step_start_ns,
        steps.cpu_step_end_ns,
        steps.cpu_step_end_ns - steps.cpu_step_start_ns as cpu_step_ns,
        coalesce(steps.kernel_count, 0) as kernel_count,
        steps.gpu_step_start_ns,
        steps.gpu_step_end_ns,
        steps.gpu_step_end_ns - steps.gpu_step_start_ns as gpu_step_ns,
        steps.is_last_gpu_step,
        busy.gpu_busy_ns,
        steps.gpu_step_start_ns - steps.cpu_step_start_ns as gpu_lag_ns,
        coalesce(
            steps.gpu_step_end_ns - steps.gpu_step_start_ns,
            steps.cpu_step_end_ns - steps.cpu_step_start_ns
        ) as step_ns,
        case
            when steps.gpu_step_start_ns is not null then 'gpu_kernels'
            else steps.cpu_step_source
        end as step_source,
        coalesce(clock_offsets.offset_ns, 0) as clock_offset_ns,
        steps.cpu_step_start_ns + coalesce(clock_offsets.offset_ns, 0)
            as aligned_cpu_step_start_ns,
        steps.gpu_step_start_ns + coalesce(clock_offsets.offset_ns, 0)
            as aligned_gpu_step_start_ns
    from steps
    inner join traces
        on steps.trace_id = traces.trace_id
    left join clock_offsets
        on
            traces.run_id = clock_offsets.run_id
            and traces.rank = clock_offsets.rank
    left join busy
        on
            steps.trace_id = busy.trace_id
            and steps.iteration = busy.iteration
)

select * from final
