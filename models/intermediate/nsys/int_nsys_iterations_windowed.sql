{#
    One row per training iteration of each GPU of an Nsight Systems trace
    (trace_id, iteration), found as nsys-ai's `iters` finds them, read from
    the lake so that the step rules can use them (int_step_windows_resolved) before
    any kernel is classified; int_nsys_iterations_detected adds nsys-ai's
    figures.

    Primary thread: the thread that launches most of the GPU's kernels
    (category `kernel`, inside the capture window: macro
    capture_window_conditions; ties to the lowest track id).
    Markers: NVTX push/pop ranges (int_annotation_ranges_nested) on that
    thread whose name matches a row of seeds/nsys_iteration_markers.csv
    (the best-priority pattern that matches anything on that GPU), keeping
    only the outermost; an iteration holds the kernels whose launch call
    lies wholly inside it (cpu_start_ns..cpu_end_ns).
    Fallback (no marker matches): the primary thread's kernels in GPU
    order, a new iteration starting at a kernel that begins more than
    var('nsys_iteration_gap_ns') after every earlier kernel ended
    (is_heuristic); the iteration's kernels start within
    gpu_start_ns..gpu_end_ns, and cpu_start_ns..cpu_end_ns span their
    launches. opening_slice_id: the marker range, or the kernel launched
    first in a gap-rule iteration. is_consistent: every GPU of the same export file (traces'
    path) found the same number of iterations, so the gap rule can time
    the run's steps (it is a heuristic per GPU: on the shared 2-GPU MFU
    export it finds 3 iterations on one GPU and 1 on the other); marker
    iterations are always consistent. A small table rebuilt each time from
    the Nsight traces' files only (none on a warehouse of Kineto traces).
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The Nsight traces, read once: the lake scan reads only their files, and
    none at all on a warehouse of Kineto traces (macros/per_trace.sql,
    macros/lake_scan.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with

launched as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
        ts_ns,
        end_ns
    {#- Aliased only where the capture window's subqueries name it (sqlfluff: AL05). #}
    {%- set windowed = var('capture_window_start_ns') is not none
        or var('capture_window_end_ns') is not none %}
    from {{ lake_scan('slices', nsys_traces) }}{{ ' as kernels' if windowed }}
    where
        is_gpu
        and category = 'kernel'
        and launch_track_id is not null
        and {{ trace_filter(nsys_traces) }}{{ capture_window_conditions('kernels') }}
),

traces as (
    select
        trace_id,
        path
    from {{ ref('int_traces_loaded') }}
    where {{ trace_filter(nsys_traces) }}
),

ranges as (
    select
        trace_id,
        slice_id,
        track_id,
        name,
        ts_ns,
        end_ns
    from {{ ref('int_annotation_ranges_nested') }}
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

primary_threads as (
    select
        trace_id,
        max_by(launch_track_id, launches) as track_id
    from (
        select
            trace_id,
            launch_track_id,
            count(*) * 1000000 - launch_track_id as launches
        from launched
        group by 1, 2
    ) as counted
    group by 1
),

primary_kernels as (
    select launched.*
    from launched
    inner join primary_threads
        on
            launched.trace_id = primary_threads.trace_id
            and launched.launch_track_id = primary_threads.track_id
),

primary_ranges as (
    select ranges.*
    from ranges
    inner join primary_threads
        on
            ranges.trace_id = primary_threads.trace_id
            and ranges.track_id = primary_threads.track_id
),

{# Each distinct name matched once against the patterns, then joined back by
   name: a pattern held in a column is compiled for every pair it is tried
   on, and a thread repeats a few names a million times (the regex join of
   every range took 30 s of a 97 MB export's 54 s build). #}
matching_names as (
    select
        distinct_names.name,
        min(markers.priority) as priority
    from (select distinct primary_ranges.name from primary_ranges) as distinct_names
    inner join markers
        on {{ regex_matches('distinct_names.name', 'markers.pattern') }}
    group by 1
),

matching_ranges as (
    select
        primary_ranges.*,
        matching_names.priority
    from primary_ranges
    inner join matching_names
        on primary_ranges.name = matching_names.name
),

best_markers as (
    select
        trace_id,
        min(priority) as priority
    from matching_ranges
    group by 1
),

{# Outermost matching ranges: no other matching range of the same priority
   on the thread contains them. #}
marker_ranges as (
    select matching_ranges.*
    from matching_ranges
    inner join best_markers
        on
            matching_ranges.trace_id = best_markers.trace_id
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

marker_iterations as (
    select
        trace_id,
        row_number() over (partition by trace_id order by ts_ns, slice_id) - 1 as iteration,
        slice_id as marker_slice_id,
        name as marker_name,
        false as is_heuristic,
        slice_id as opening_slice_id,
        ts_ns as cpu_start_ns,
        end_ns as cpu_end_ns,
        cast(null as bigint) as gpu_start_ns,
        cast(null as bigint) as gpu_end_ns
    from marker_ranges
),

gaps as (
    select
        primary_kernels.*,
        max(primary_kernels.end_ns) over (
            partition by primary_kernels.trace_id
            order by primary_kernels.ts_ns, primary_kernels.slice_id
            rows between unbounded preceding and 1 preceding
        ) as previous_end_ns
    from primary_kernels
    where primary_kernels.trace_id not in (select best_markers.trace_id from best_markers)
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
            partition by trace_id
            order by ts_ns, slice_id
            rows between unbounded preceding and current row
        ) as bigint) as iteration
    from gaps
),

heuristic_iterations as (
    select
        trace_id,
        iteration,
        cast(null as bigint) as marker_slice_id,
        'heuristic_step_' || iteration as marker_name,
        true as is_heuristic,
        min_by(slice_id, launch_ts_ns) as opening_slice_id,
        min(launch_ts_ns) as cpu_start_ns,
        max(launch_end_ns) as cpu_end_ns,
        min(ts_ns) as gpu_start_ns,
        max(end_ns) as gpu_end_ns
    from numbered
    group by 1, 2
),

iterations as (
    select * from marker_iterations
    union all
    select * from heuristic_iterations
),

{# Per export file: do all its GPUs agree on the number of iterations? #}
file_counts as (
    select
        traces.path,
        count(distinct counted.iterations) = 1 as is_consistent
    from (
        select
            trace_id,
            count(*) as iterations
        from iterations
        group by 1
    ) as counted
    inner join traces
        on counted.trace_id = traces.trace_id
    group by 1
),

final as (
    select
        iterations.trace_id,
        iterations.iteration,
        iterations.marker_slice_id,
        iterations.marker_name,
        iterations.is_heuristic,
        not iterations.is_heuristic or file_counts.is_consistent as is_consistent,
        primary_threads.track_id as primary_track_id,
        iterations.opening_slice_id,
        iterations.cpu_start_ns,
        iterations.cpu_end_ns,
        iterations.gpu_start_ns,
        iterations.gpu_end_ns
    from iterations
    inner join primary_threads
        on iterations.trace_id = primary_threads.trace_id
    inner join traces
        on iterations.trace_id = traces.trace_id
    inner join file_counts
        on traces.path = file_counts.path
)

select * from final
