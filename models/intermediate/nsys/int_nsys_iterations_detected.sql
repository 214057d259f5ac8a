{#
    One row per training iteration of each GPU of an Nsight Systems trace
    (run_id, rank, iteration) with nsys-ai's `iters` figures: the
    iterations are int_nsys_iterations_windowed's (which documents how they
    are found); its kernels are the primary thread's (category `kernel`,
    from int_kernels_classified, so the capture window applies) whose launch
    call lies wholly inside a marker range, or, under the gap rule, that
    start within the iteration's GPU segment. gpu_start_ns/gpu_end_ns bound
    them; compute_ns and communication_ns sum their durations by class
    (communication kernels as fct_kernels' kind says, every other kernel
    compute, as nsys-ai counts them). fct_nsys_iterations shows the rows.
#}

{#- The Nsight traces, read once (macros/per_trace.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with

windows as (
    select * from {{ ref('int_nsys_iterations_windowed') }}  -- noqa: AM04
),

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        case when kind = 'communication' then 'communication' else 'compute' end as nsys_class,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where
        category = 'kernel'
        and {{ trace_filter(nsys_traces) }}
),

trace_ranks as (
    select
        run_id,
        rank,
        trace_id
    from {{ ref('int_traces_loaded') }}
    where {{ trace_filter(nsys_traces) }}
),

members as (
    select
        windows.trace_id,
        windows.iteration,
        kernels.slice_id,
        kernels.nsys_class,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns
    from windows
    inner join kernels
        on
            windows.trace_id = kernels.trace_id
            and windows.primary_track_id = kernels.launch_track_id
            and (
                (
                    not windows.is_heuristic
                    and windows.cpu_start_ns <= kernels.launch_ts_ns
                    and windows.cpu_end_ns >= kernels.launch_end_ns
                )
                or (
                    windows.is_heuristic
                    and kernels.ts_ns between windows.gpu_start_ns and windows.gpu_end_ns
                )
            )
),

totals as (
    select
        trace_id,
        iteration,
        min(ts_ns) as gpu_start_ns,
        max(end_ns) as gpu_end_ns,
        count(slice_id) as kernel_count,
        cast(coalesce(sum(dur_ns) filter (where nsys_class = 'compute'), 0) as bigint)
            as compute_ns,
        cast(coalesce(sum(dur_ns) filter (where nsys_class = 'communication'), 0) as bigint)
            as communication_ns,
        count(slice_id) filter (where nsys_class = 'communication')
            as communication_kernel_count
    from members
    group by 1, 2
),

final as (
    select
        trace_ranks.run_id,
        trace_ranks.rank,
        windows.iteration,
        windows.marker_name,
        windows.is_heuristic,
        windows.cpu_start_ns,
        windows.cpu_end_ns,
        totals.gpu_start_ns,
        totals.gpu_end_ns,
        coalesce(totals.kernel_count, 0) as kernel_count,
        coalesce(totals.compute_ns, 0) as compute_ns,
        coalesce(totals.communication_ns, 0) as communication_ns,
        coalesce(totals.communication_kernel_count, 0) as communication_kernel_count,
        totals.gpu_end_ns - totals.gpu_start_ns as gpu_span_ns
    from windows
    inner join trace_ranks
        on windows.trace_id = trace_ranks.trace_id
    left join totals
        on
            windows.trace_id = totals.trace_id
            and windows.iteration = totals.iteration
)

select * from final
