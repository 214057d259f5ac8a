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

    Iteration, the one rule: a trace with `ProfilerStep#N` ranges
    (int_profiler_steps) gives a CPU slice the N of the step holding its
    start, and a GPU slice that of its launch; a slice outside every step
    (or GPU work without launch) gets NULL and `is_outside_steps`. A trace
    without steps is one iteration: its `iteration_N` folder, else
    var('default_iteration').
    Per trace (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{#- The traces to compute, as a predicate on each scan's own column (read
    once, named as literals: see macros/per_trace.sql); the lake scans read
    only their files (macros/lake_scan.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

traces as (
    select
        trace_id,
        iteration,
        min_profiler_step
    from {{ lake_scan('traces', pending) }}
    where {{ new_traces }}
),

profiler_steps as (
    select
        trace_id,
        step_number,
        ts_ns,
        window_end_ns
    from {{ ref('int_profiler_steps') }}
    where {{ new_traces }}
),

{# One scan: the slices kept (see above), every column later models read. #}
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
    from {{ lake_scan('slices', pending) }}
    where
        {{ new_traces }}
        and (
            is_gpu
            or frame_kind is not null
            or name like 'c10d::%'
            or name like 'gloo:%'
            or {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
        )
),

{# A CPU slice is placed in time by its own start, GPU work by its launch's;
   the step windows of a trace never overlap (int_profiler_steps), so the
   range join finds at most one. A trace without steps is one iteration. #}
final as (
    select
        kept.*,
        case
            when traces.min_profiler_step is null
                then coalesce(traces.iteration, {{ var('default_iteration') }})
            else profiler_steps.step_number
        end as iteration,
        (
            traces.min_profiler_step is not null and profiler_steps.step_number is null
        ) as is_outside_steps
    from kept
    inner join traces
        on kept.trace_id = traces.trace_id
    left join profiler_steps
        on
            kept.trace_id = profiler_steps.trace_id
            and case when kept.is_gpu then kept.launch_ts_ns else kept.ts_ns end
            >= profiler_steps.ts_ns
            and case when kept.is_gpu then kept.launch_ts_ns else kept.ts_ns end
            < profiler_steps.window_end_ns
)

select * from final
