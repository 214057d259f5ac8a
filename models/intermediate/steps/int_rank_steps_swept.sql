{#
    One row per trace x timing source x iteration: the step window as the
    GPU ran it and as the CPU ran it, and the window's exclusive parts
    (macro sweep_step_parts), which add up to step_ns exactly.

    GPU window (timing_source 'gpu', step_rule 'gpu_projected_step'): from
    the first kernel (earliest start) launched in step N to the first
    kernel launched in step N + 1 of the same trace; the trace's last step
    ends at the end of its last kernel. So a trace's GPU steps tile its
    kernel timeline. The steps are int_step_windows_resolved's: ProfilerStep ranges,
    else an Nsight trace's NVTX iteration markers or gap rule (step_rule
    'gpu_projected_nvtx_marker', 'gpu_projected_gap_rule'). A trace
    without them (plain captures, an Nsight export whose GPUs disagree on
    the gap rule) has its kernels in the trace's own iteration (its
    folder's, ingest's iteration hint) or in none: one window from its
    first kernel's start to its last kernel's end (step_rule
    'gpu_whole_trace'; iteration NULL when no kernel has one). Parts: every kernel, copy and fill
    running inside the window, whatever step launched it (the islands of
    int_kernel_intervals_merged, so kernel_time_unit_ns applies).
    CPU window (timing_source 'cpu'): the step window, cut at the next
    one's start (step_rule 'profiler_step', 'nvtx_marker' or 'gap_rule'),
    else first start to
    last end of the iteration's Megatron step frames, cut at the next
    iteration's first frame ('megatron_frames'). Parts: the Megatron step
    frames (int_cpu_steps_classified) inside the window, swept only for a
    trace without a GPU window: a trace with kernels is timed on the GPU,
    so its CPU window is kept for gpu_lag_ns alone and reads as all idle.
    Which of the two a run uses is decided once, in int_rank_steps_timed.
    Per trace (materialized per_trace, keyed by trace_id): windows
    and parts come from the trace's own kernels and frames.
#}

{%- set pending = traces_pending() %}

with

kernels as (
    select
        trace_id,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where {{ trace_filter(pending) }}
),

kernel_islands as (
    select
        trace_id,
        kind,
        start_ns,
        end_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where
        kind in ('compute', 'communication', 'memory')
        and {{ trace_filter(pending) }}
),

profiler_steps as (
    select
        trace_id,
        step_rule,
        step_number as iteration,
        ts_ns as start_ns,
        window_end_ns as end_ns
    from {{ ref('int_step_windows_resolved') }}
    where {{ trace_filter(pending) }}
),

{# A trace's windows come from one rule (int_step_windows_resolved). #}
step_rules as (
    select distinct
        trace_id,
        step_rule
    from profiler_steps
),

step_frames as (
    select
        trace_id,
        iteration,
        phase,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where {{ trace_filter(pending) }}
),

trace_ranks as (
    select
        run_id,
        rank,
        trace_id
    from {{ ref('int_traces_loaded') }}
    where {{ trace_filter(pending) }}
),

kernel_iterations as (
    select
        trace_id,
        iteration,
        count(*) as kernel_count,
        min(ts_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from kernels
    where iteration is not null
    group by 1, 2
),

{# A trace with kernels but none launched inside a step: one window. #}
whole_trace_kernels as (
    select
        trace_id,
        cast(null as bigint) as iteration,
        count(*) as kernel_count,
        min(ts_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from kernels
    where trace_id not in (select kernel_iterations.trace_id from kernel_iterations)
    group by 1
),

gpu_windows as (
    select
        kernel_iterations.trace_id,
        'gpu' as timing_source,
        kernel_iterations.iteration,
        case
            when step_rules.step_rule = 'profiler_step' then 'gpu_projected_step'
            when step_rules.step_rule is not null then 'gpu_projected_' || step_rules.step_rule
            else 'gpu_whole_trace'
        end as step_rule,
        kernel_iterations.kernel_count,
        kernel_iterations.first_start_ns as start_ns,
        coalesce(
            lead(kernel_iterations.first_start_ns) over (
                partition by kernel_iterations.trace_id
                order by kernel_iterations.first_start_ns, kernel_iterations.iteration
            ),
            kernel_iterations.last_end_ns
        ) as end_ns
    from kernel_iterations
    left join step_rules
        on kernel_iterations.trace_id = step_rules.trace_id
    union all
    select
        trace_id,
        'gpu' as timing_source,
        iteration,
        'gpu_whole_trace' as step_rule,
        kernel_count,
        first_start_ns as start_ns,
        last_end_ns as end_ns
    from whole_trace_kernels
),

frame_iterations as (
    select
        trace_id,
        iteration,
        min(ts_ns) as first_start_ns,
        max(end_ns) as last_end_ns
    from step_frames
    where
        iteration is not null
        and trace_id not in (select profiler_steps.trace_id from profiler_steps)
    group by 1, 2
),

cpu_windows as (
    select
        trace_id,
        'cpu' as timing_source,
        iteration,
        step_rule,
        cast(0 as bigint) as kernel_count,
        start_ns,
        end_ns
    from profiler_steps
    union all
    select
        trace_id,
        'cpu' as timing_source,
        iteration,
        'megatron_frames' as step_rule,
        cast(0 as bigint) as kernel_count,
        first_start_ns as start_ns,
        least(
            last_end_ns,
            coalesce(
                lead(first_start_ns) over (
                    partition by trace_id order by first_start_ns, iteration
                ),
                last_end_ns
            )
        ) as end_ns
    from frame_iterations
),

windows as (
    select
        *,
        row_number() over (
            partition by trace_id, timing_source order by start_ns, iteration
        ) as window_number
    from (
        select * from gpu_windows
        union all
        select * from cpu_windows
    ) as both_sources
),

intervals as (
    select
        trace_id,
        'gpu' as timing_source,
        kind,
        start_ns,
        end_ns
    from kernel_islands
    union all
    {# CPU parts only where a trace has no GPU window: a run with kernels
       is timed on the GPU (int_rank_steps_timed), so the CPU parts of its
       traces would never be read, while their CPU windows still give
       gpu_lag_ns (a window without intervals is all idle, at no cost). #}
    select
        trace_id,
        'cpu' as timing_source,
        case
            when phase in ('pp_p2p', 'dp_sync') then 'communication'
            when phase = 'optimizer' then 'optimizer'
            else 'compute'
        end as kind,
        ts_ns as start_ns,
        end_ns
    from step_frames
    where trace_id not in (select gpu_windows.trace_id from gpu_windows)
),

parts as (
    {{ sweep_step_parts('intervals', 'windows', ['trace_id']) }}
),

final as (
    select
        trace_ranks.run_id,
        trace_ranks.rank,
        windows.trace_id,
        windows.timing_source,
        windows.iteration,
        windows.step_rule,
        windows.kernel_count,
        windows.start_ns as step_start_ns,
        windows.end_ns as step_end_ns,
        windows.end_ns - windows.start_ns as step_ns,
        cast(coalesce(parts.step_compute_ns, 0) as bigint) as step_compute_ns,
        cast(coalesce(parts.step_overlap_ns, 0) as bigint) as step_overlap_ns,
        cast(coalesce(parts.step_exposed_communication_ns, 0) as bigint)
            as step_exposed_communication_ns,
        cast(coalesce(parts.step_exposed_memory_ns, 0) as bigint) as step_exposed_memory_ns,
        cast(coalesce(parts.step_optimizer_ns, 0) as bigint) as step_optimizer_ns,
        cast(coalesce(parts.step_idle_ns, windows.end_ns - windows.start_ns) as bigint)
            as step_idle_ns
    from windows
    inner join trace_ranks
        on windows.trace_id = trace_ranks.trace_id
    left join parts
        on
            windows.trace_id = parts.trace_id
            and windows.timing_source = parts.timing_source
            and windows.window_number = parts.window_number
)

select * from final
