{#
    Every slice later models read (trace_id, slice_id), with its context
    computed once so no later model re-derives it (in the spirit of
    Perfetto's `thread_slice`): its track kind (GPU stream or CPU thread),
    its iteration, the CPU launch of GPU work, and the parts of a with_stack
    frame name. Kept: all GPU work, and the CPU slices with a role: Python
    and module frames, `c10d::*`/`gloo:*` collectives and profiler steps.
    Plain CPU ops and runtime calls (most of a trace) stay in
    stg_lake__slices: a launch's name, thread and start are copied onto the
    GPU work it launched, which is all later models need of them.

    Iteration, the one rule: a trace with `ProfilerStep#N` ranges
    (int_profiler_steps) gives a CPU slice the N of the step holding its
    start, and a GPU slice that of its launch; a slice outside every step
    (or GPU work without launch) gets NULL and `is_outside_steps`. A trace
    without steps is one iteration: its `iteration_N` folder, else
    var('default_iteration').
    Launch of GPU work: the var('launch_flow_category') flow (`ac2g`) into
    it when there is one (CUDA graphs share one correlation id across many
    kernels), else the CPU slice of the same trace with the same
    correlation id; that slice also wins over a flow starting at a slice
    with another correlation id (a mis-bound flow, see launch_ids).
    Frames: `path/file.py(N): func` names split into frame_file and
    frame_function; `nn.Module: Name` frames have frame_kind `module`.
    The slices are read in three filtered scans (GPU work, launch
    candidates, kept slices) rather than one shared CTE: a CTE read twice is
    materialized, which would hold every slice of the new traces in memory.
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
{%- set new_slice_traces = trace_filter(pending, 'slices.trace_id') %}

with

traces as (
    select
        trace_id,
        iteration,
        min_profiler_step
    from {{ ref('stg_lake__traces') }}
    where {{ new_traces }}
),

threads as (
    select
        trace_id,
        track_id,
        is_gpu
    from {{ lake_scan('threads', pending) }}
    where {{ new_traces }}
),

flows as (
    select
        trace_id,
        slice_out,
        slice_in
    from {{ lake_scan('flows', pending) }}
    where
        category = '{{ var("launch_flow_category") }}'
        and {{ new_traces }}
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

flow_sources as (
    select distinct
        trace_id,
        slice_out
    from flows
),

{# Scan 1: GPU work (kernels, copies, fills, GPU annotations). #}
gpu_slices as (
    select
        slices.trace_id,
        slices.slice_id,
        slices.correlation
    from {{ lake_scan('slices', pending) }} as slices
    inner join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
    where
        threads.is_gpu
        and {{ new_slice_traces }}
),

{# Scan 2: CPU slices that can launch GPU work: those with a correlation id
   (runtime calls) and the sources of launch flows. #}
cpu_slices as (
    select
        slices.trace_id,
        slices.slice_id,
        slices.track_id,
        slices.name,
        slices.correlation,
        slices.ts_ns,
        slices.end_ns
    from {{ lake_scan('slices', pending) }} as slices
    left join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
    left join flow_sources
        on
            slices.trace_id = flow_sources.trace_id
            and slices.slice_id = flow_sources.slice_out
    where
        not coalesce(threads.is_gpu, false)
        and (slices.correlation is not null or flow_sources.slice_out is not null)
        and {{ new_slice_traces }}
),

{# Scan 3: the slices kept (see above), every column. #}
kept as (
    select
        slices.run_id,
        slices.rank,
        slices.trace_id,
        slices.slice_id,
        slices.track_id,
        slices.parent_id,
        slices.depth,
        slices.category,
        slices.name,
        slices.correlation,
        slices.device,
        slices.stream,
        slices.collective_name,
        slices.process_group_name,
        slices.process_group_desc,
        slices.process_group_ranks,
        slices.dtype,
        slices.group_size,
        slices.in_msg_nelems,
        slices.out_msg_nelems,
        slices.is_partial_overlap,
        slices.ts_ns,
        slices.dur_ns,
        slices.end_ns,
        coalesce(threads.is_gpu, false) as is_gpu,
        case
            when slices.name like '%): %' then 'python'
            when slices.name like 'nn.Module: %' then 'module'
        end as frame_kind
    from {{ lake_scan('slices', pending) }} as slices
    left join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
    where
        {{ new_slice_traces }}
        and (
            coalesce(threads.is_gpu, false)
            or slices.name like '%): %'
            or slices.name like 'nn.Module: %'
            or slices.name like 'c10d::%'
            or slices.name like 'gloo:%'
            or {{ regex_matches('slices.name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
        )
),

launches_by_flow as (
    select
        flows.trace_id,
        flows.slice_in as slice_id,
        min(flows.slice_out) as launch_slice_id,
        min(cpu_slices.correlation) as launch_correlation
    from flows
    left join cpu_slices
        on
            flows.trace_id = cpu_slices.trace_id
            and flows.slice_out = cpu_slices.slice_id
    group by 1, 2
),

launches_by_correlation as (
    select
        gpu_slices.trace_id,
        gpu_slices.slice_id,
        min(cpu_slices.slice_id) as launch_slice_id,
        min(gpu_slices.correlation) as launch_correlation
    from gpu_slices
    inner join cpu_slices
        on
            gpu_slices.trace_id = cpu_slices.trace_id
            and gpu_slices.correlation = cpu_slices.correlation
    group by 1, 2
),

{# The flow wins (CUDA graphs share one correlation id across many
   kernels), unless it starts at a CPU slice whose own correlation id
   differs from the one the work shares with its runtime call: some Kineto
   traces bind an ac2g flow to a neighbouring call (dlrm_8rank: a memset's
   flow starts at cudaPeekAtLastError, its correlation names cudaMemsetAsync). #}
launch_choices as (
    select
        coalesce(launches_by_flow.trace_id, launches_by_correlation.trace_id) as trace_id,
        coalesce(launches_by_flow.slice_id, launches_by_correlation.slice_id) as slice_id,
        launches_by_flow.launch_slice_id as flow_launch_slice_id,
        launches_by_correlation.launch_slice_id as correlation_launch_slice_id,
        launches_by_flow.launch_slice_id is not null
        and (
            launches_by_correlation.launch_slice_id is null
            or launches_by_flow.launch_correlation is null
            or launches_by_flow.launch_correlation = launches_by_correlation.launch_correlation
        ) as is_flow_launch
    from launches_by_flow
    full outer join launches_by_correlation
        on
            launches_by_flow.trace_id = launches_by_correlation.trace_id
            and launches_by_flow.slice_id = launches_by_correlation.slice_id
),

launch_ids as (
    select
        trace_id,
        slice_id,
        case
            when is_flow_launch then flow_launch_slice_id else correlation_launch_slice_id
        end as launch_slice_id,
        case when is_flow_launch then 'flow' else 'correlation' end as launch_source
    from launch_choices
),

launches as (
    select
        launch_ids.trace_id,
        launch_ids.slice_id,
        launch_ids.launch_slice_id,
        launch_ids.launch_source,
        cpu_slices.name as launch_name,
        cpu_slices.track_id as launch_track_id,
        cpu_slices.ts_ns as launch_ts_ns,
        cpu_slices.end_ns as launch_end_ns
    from launch_ids
    inner join cpu_slices
        on
            launch_ids.trace_id = cpu_slices.trace_id
            and launch_ids.launch_slice_id = cpu_slices.slice_id
),

{# A CPU slice is placed in time by its own start, GPU work by its launch's;
   the step windows of a trace never overlap (int_profiler_steps), so the
   range join finds at most one. #}
stepped as (
    select
        kept.*,
        launches.launch_slice_id,
        launches.launch_source,
        launches.launch_name,
        launches.launch_track_id,
        launches.launch_ts_ns,
        launches.launch_end_ns,
        traces.min_profiler_step is not null as has_steps,
        coalesce(traces.iteration, {{ var('default_iteration') }}) as trace_iteration,
        profiler_steps.step_number
    from kept
    inner join traces
        on kept.trace_id = traces.trace_id
    left join launches
        on
            kept.is_gpu
            and kept.trace_id = launches.trace_id
            and kept.slice_id = launches.slice_id
    left join profiler_steps
        on
            kept.trace_id = profiler_steps.trace_id
            and case when kept.is_gpu then launches.launch_ts_ns else kept.ts_ns end
            >= profiler_steps.ts_ns
            and case when kept.is_gpu then launches.launch_ts_ns else kept.ts_ns end
            < profiler_steps.window_end_ns
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        parent_id,
        depth,
        is_gpu,
        category,
        name,
        frame_kind,
        case
            when name like '%): %' then substring(name, 1, instr(name, '(') - 1)
        end as frame_file,
        case
            when name like '%): %' then substring(name, instr(name, '): ') + 3)
        end as frame_function,
        case when has_steps then step_number else trace_iteration end as iteration,
        (has_steps and step_number is null) as is_outside_steps,
        launch_slice_id,
        launch_source,
        launch_name,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
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
        is_partial_overlap,
        ts_ns,
        dur_ns,
        end_ns
    from stepped
)

select * from final
