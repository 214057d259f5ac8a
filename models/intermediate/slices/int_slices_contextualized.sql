{#
    Every slice later models read (trace_id, slice_id), with its context, so
    no later model re-derives it (in the spirit of Perfetto's
    `thread_slice`): its track kind (GPU stream or CPU thread), its
    iteration, the CPU launch of GPU work, and the parts of a with_stack
    frame name. Kept: all GPU work, and the CPU slices with a role: Python
    and module frames, `c10d::*`/`gloo:*` collectives and profiler steps.
    Plain CPU ops and runtime calls (most of a trace) stay in
    stg_lake__slices: a launch's name, thread and start are on the GPU work
    it launched, which is all later models need of them.

    What the slice's own trace decides comes from the lake, computed by
    ingest as it writes the trace (ingest/slice_context.py; the rules are in
    the lake source's column docs): is_gpu; frame_kind (`python` for
    `path/file.py(N): func`, `module` for `nn.Module: Name`), frame_file
    and frame_function; the launch of GPU work (the `ac2g` flow into it,
    else the CPU slice with its correlation id, which also wins over a
    mis-bound flow) with launch_source, name, track, start and end.
    Computing these here took three scans of the lake and the launch joins:
    a third of a full build's serial start (benchmarks/README.md).

    Iteration, the one rule: a trace with step windows (int_step_windows_resolved:
    `ProfilerStep#N` ranges, else an Nsight trace's NVTX iteration markers
    or gap rule) gives a CPU slice the N of the window holding its start,
    and a GPU slice that of its launch; a slice outside every window (or
    GPU work without launch) gets NULL and `is_outside_steps`. A trace
    without windows is one iteration: its `iteration_N` folder, else
    var('default_iteration').
    Per trace (materialized per_trace): keyed by trace_id.
#}

{#- The traces to compute, as a predicate on each scan's own column (read
    once, named as literals: see macros/per_trace.sql); the lake scans read
    only their files (macros/lake_scan.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

step_windows as (
    select
        trace_id,
        step_number,
        ts_ns,
        window_end_ns,
        gpu_ts_ns,
        gpu_window_end_ns
    from {{ ref('int_step_windows_resolved') }}
    where {{ new_traces }}
),

{# The trace's folder iteration from int_traces_loaded (built first, the
   lake's `traces` rows kept as a table), not from the lake: on a full build
   the lake read was a glob over every trace's `traces` file, twice (the
   join's filter pushdown read it again). #}
traces as (
    select
        trace_id,
        iteration,
        trace_id in (select step_windows.trace_id from step_windows) as has_steps
    from {{ ref('int_traces_loaded') }}
    where {{ new_traces }}
),

{#- The kept slices are those ingest marked has_role (ingest/slice_context.py),
    its rows first in each file, in their own row group: the scan skips the
    other row groups by statistics (half the slices, plain CPU ops and
    runtime calls) instead of decoding them. The same rule in SQL reads the
    traces an ingest before lake format 4 wrote (has_role NULL; a lake mixes
    formats when older runs were not ingested again), and every trace when
    var('profiler_step_prefix') is not the one ingest marks. -#}
{%- set older_traces = loaded_traces('coalesce(loaded.lake_format, 0) < 4') %}
{%- set marks_steps = var('profiler_step_prefix') == 'ProfilerStep#' %}
{%- set kept_by_name -%}
    (
        is_gpu
        or frame_kind is not null
        or name like 'c10d::%'
        or name like 'gloo:%'
        or {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
    )
{%- endset %}

role_slices as (
    select *  -- noqa: AM04
    from {{ lake_scan('slices', pending) }}
    where
        {{ new_traces }}
        and {{ 'has_role' if marks_steps else kept_by_name }}
    {% if marks_steps and older_traces.get('ids', [none]) | length > 0 -%}
        union all
        select *  -- noqa: AM04
        from {{ lake_scan('slices', older_traces) }}
        where
            {{ new_traces }}
            and {{ trace_filter(older_traces) }}
            and has_role is null
            and {{ kept_by_name }}
    {%- endif %}
),

{# One scan (two with older traces): the slices kept (see above), every
   column later models read. #}
kept as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        is_gpu,
        category,
        name,
        frame_kind,
        frame_file,
        frame_function,
        launch_slice_id,
        launch_source,
        launch_name,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
        annotation_slice_id,
        correlation,
        device,
        stream,
        collective_name,
        process_group_name,
        process_group_desc,
        process_group_ranks,
        dtype,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        ts_ns,
        dur_ns,
        end_ns
    from role_slices
),

{# A CPU slice is placed in time by its own start, GPU work by its launch's,
   or by its own start in windows with GPU bounds (the gap rule, on the GPU
   timeline); the windows of a trace never overlap (int_step_windows_resolved), so
   the range join finds at most one. A trace without windows is one
   iteration. #}
final as (
    select
        kept.*,
        case
            when not traces.has_steps
                then coalesce(traces.iteration, {{ var('default_iteration') }})
            else step_windows.step_number
        end as iteration,
        (traces.has_steps and step_windows.step_number is null) as is_outside_steps
    from kept
    inner join traces
        on kept.trace_id = traces.trace_id
    left join step_windows
        on
            kept.trace_id = step_windows.trace_id
            and (
                (
                    (not kept.is_gpu or step_windows.gpu_ts_ns is null)
                    and case when kept.is_gpu then kept.launch_ts_ns else kept.ts_ns end
                    >= step_windows.ts_ns
                    and case when kept.is_gpu then kept.launch_ts_ns else kept.ts_ns end
                    < step_windows.window_end_ns
                )
                or (
                    kept.is_gpu
                    and kept.ts_ns >= step_windows.gpu_ts_ns
                    and kept.ts_ns < step_windows.gpu_window_end_ns
                )
            )
)

select * from final
