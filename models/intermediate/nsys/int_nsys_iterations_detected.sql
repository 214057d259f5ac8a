{#
    One row per training iteration of each GPU of an Nsight Systems trace
    (run_id, rank, iteration), found as nsys-ai's `iters` finds them.

    Primary thread: the thread that launches most of the GPU's kernels.
    Markers: NVTX push/pop ranges on that thread whose name matches a row
    of seeds/nsys_iteration_markers.csv (the best-priority pattern that
    matches anything on that GPU), keeping only outermost ones; an
    iteration holds the kernels whose launch call lies wholly inside it.
    Fallback (no marker matches): the primary thread's kernels in GPU
    order, a new iteration starting at a kernel that begins more than
    var('nsys_iteration_gap_ns') after every earlier kernel ended
    (is_heuristic). gpu_start_ns/gpu_end_ns bound the iteration's kernels;
    compute_ns and communication_ns sum their durations by class
    (communication kernels as fct_kernels' kind says, every other kernel
    compute, as nsys-ai counts them). Kernels (copies and fills left out,
    as nsys-ai) and their launches are int_kernels_classified's, so the
    capture window applies; NVTX push/pop ranges the trace's own (lake
    column annotation_kind, ingest/annotation_context.py). fct_nsys_iterations shows the rows.
#}

{#- The Nsight traces, read once: the lake scan reads only their files, and
    none at all on a warehouse of Kineto traces (macros/per_trace.sql,
    macros/lake_scan.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with

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

ranges as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        name,
        ts_ns,
        end_ns
    from {{ lake_scan('slices', nsys_traces) }}
    where
        annotation_kind = 'nvtx'
        and {{ trace_filter(nsys_traces) }}
),

markers as (
    select
        priority,
        pattern
    from {{ ref('nsys_iteration_markers') }}
),

launched as (
    select * from kernels  -- noqa: AM04
    where launch_track_id is not null
),

primary_threads as (
    select
        run_id,
        rank,
        max_by(launch_track_id, launches) as track_id
    from (
        select
            run_id,
            rank,
            launch_track_id,
            count(*) * 1000000 - launch_track_id as launches
        from launched
        group by 1, 2, 3
    ) as counted
    group by 1, 2
),

primary_kernels as (
    select launched.*
    from launched
    inner join primary_threads
        on
            launched.run_id = primary_threads.run_id
            and launched.rank = primary_threads.rank
            and launched.launch_track_id = primary_threads.track_id
),

matching_ranges as (
    select
        ranges.*,
        min(markers.priority) as priority
    from ranges
    inner join primary_threads
        on
            ranges.run_id = primary_threads.run_id
            and ranges.rank = primary_threads.rank
            and ranges.track_id = primary_threads.track_id
    inner join markers
        on {{ regex_matches('ranges.name', 'markers.pattern') }}
    group by all
),

best_markers as (
    select
        run_id,
        rank,
        min(priority) as priority
    from matching_ranges
    group by 1, 2
),

{# Outermost matching ranges: no other matching range of the same priority
   on the thread contains them. #}
marker_ranges as (
    select matching_ranges.*
    from matching_ranges
    inner join best_markers
        on
            matching_ranges.run_id = best_markers.run_id
            and matching_ranges.rank = best_markers.rank
            and matching_ranges.priority = best_markers.priority
    where not exists (
        select 1
        from matching_ranges as outer_ranges
        where
            outer_ranges.trace_id = matching_ranges.trace_id
            and outer_ranges.priority = matching_ranges.priority
            and outer_ranges.slice_id != matching_ranges.slice_id
            and outer_ranges.ts_ns <= matching_ranges.ts_ns
            and outer_ranges.end_ns >= matching_ranges.end_ns
    )
),

marker_totals as (
    select
        marker_ranges.run_id,
        marker_ranges.rank,
        marker_ranges.trace_id,
        marker_ranges.slice_id as marker_slice_id,
        marker_ranges.name as marker_name,
        false as is_heuristic,
        marker_ranges.ts_ns as cpu_start_ns,
        marker_ranges.end_ns as cpu_end_ns,
        min(primary_kernels.ts_ns) as gpu_start_ns,
        max(primary_kernels.end_ns) as gpu_end_ns,
        count(primary_kernels.slice_id) as kernel_count,
        cast(coalesce(sum(primary_kernels.dur_ns) filter (
            where primary_kernels.nsys_class = 'compute'
        ), 0) as bigint) as compute_ns,
        cast(coalesce(sum(primary_kernels.dur_ns) filter (
            where primary_kernels.nsys_class = 'communication'
        ), 0) as bigint) as communication_ns,
        count(primary_kernels.slice_id) filter (
            where primary_kernels.nsys_class = 'communication'
        ) as communication_kernel_count
    from marker_ranges
    left join primary_kernels
        on
            marker_ranges.trace_id = primary_kernels.trace_id
            and marker_ranges.ts_ns <= primary_kernels.launch_ts_ns
            and marker_ranges.end_ns >= primary_kernels.launch_end_ns
    group by 1, 2, 3, 4, 5, 6, 7, 8
),

marker_iterations as (
    select
        run_id,
        rank,
        row_number() over (partition by run_id, rank order by cpu_start_ns) - 1 as iteration,
        marker_name,
        is_heuristic,
        cpu_start_ns,
        cpu_end_ns,
        gpu_start_ns,
        gpu_end_ns,
        kernel_count,
        compute_ns,
        communication_ns,
        communication_kernel_count
    from marker_totals
),

gaps as (
    select
        primary_kernels.*,
        max(primary_kernels.end_ns) over (
            partition by primary_kernels.run_id, primary_kernels.rank
            order by primary_kernels.ts_ns, primary_kernels.slice_id
            rows between unbounded preceding and 1 preceding
        ) as previous_end_ns
    from primary_kernels
    where not exists (
        select 1
        from best_markers
        where
            best_markers.run_id = primary_kernels.run_id
            and best_markers.rank = primary_kernels.rank
    )
),

numbered as (
    select
        *,
        cast(sum(
            case
                when
                    previous_end_ns is not null
                    and ts_ns - previous_end_ns > {{ var('nsys_iteration_gap_ns') }}
                    then 1
                else 0
            end
        ) over (
            partition by run_id, rank
            order by ts_ns, slice_id
            rows between unbounded preceding and current row
        ) as bigint) as iteration
    from gaps
),

heuristic_iterations as (
    select
        run_id,
        rank,
        iteration,
        'heuristic_step_' || iteration as marker_name,
        true as is_heuristic,
        min(launch_ts_ns) as cpu_start_ns,
        max(launch_end_ns) as cpu_end_ns,
        min(ts_ns) as gpu_start_ns,
        max(end_ns) as gpu_end_ns,
        count(*) as kernel_count,
        cast(coalesce(sum(dur_ns) filter (where nsys_class = 'compute'), 0) as bigint)
            as compute_ns,
        cast(coalesce(sum(dur_ns) filter (where nsys_class = 'communication'), 0) as bigint)
            as communication_ns,
        count(*) filter (where nsys_class = 'communication') as communication_kernel_count
    from numbered
    group by 1, 2, 3
),

final as (
    select
        *,
        gpu_end_ns - gpu_start_ns as gpu_span_ns
    from marker_iterations
    union all
    select
        *,
        gpu_end_ns - gpu_start_ns as gpu_span_ns
    from heuristic_iterations
)

select * from final
