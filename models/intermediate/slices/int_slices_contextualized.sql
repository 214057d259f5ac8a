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
    correlation id.
    Frames: `path/file.py(N): func` names split into frame_file and
    frame_function; `nn.Module: Name` frames have frame_kind `module`.
    Per trace (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

with

traces as (
    select
        trace_id,
        iteration,
        min_profiler_step
    from {{ ref('stg_lake__traces') }}
    where {{ traces_to_build() }}
),

slices as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        parent_id,
        depth,
        category,
        name,
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
    from {{ ref('stg_lake__slices') }}
    where trace_id in (select traces.trace_id from traces)
),

threads as (
    select
        trace_id,
        track_id,
        is_gpu
    from {{ ref('stg_lake__threads') }}
    where trace_id in (select traces.trace_id from traces)
),

flows as (
    select
        trace_id,
        slice_out,
        slice_in
    from {{ ref('stg_lake__flows') }}
    where
        category = '{{ var("launch_flow_category") }}'
        and trace_id in (select traces.trace_id from traces)
),

profiler_steps as (
    select
        trace_id,
        step_number,
        ts_ns,
        end_ns
    from {{ ref('int_profiler_steps') }}
    where trace_id in (select traces.trace_id from traces)
),

tracked as (
    select
        slices.*,
        coalesce(threads.is_gpu, false) as is_gpu,
        case
            when slices.name like '%): %' then 'python'
            when slices.name like 'nn.Module: %' then 'module'
        end as frame_kind
    from slices
    left join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
),

flow_sources as (
    select distinct
        trace_id,
        slice_out
    from flows
),

{# CPU slices that can launch GPU work: those with a correlation id
   (runtime calls) and the sources of launch flows. #}
cpu_slices as (
    select
        tracked.trace_id,
        tracked.slice_id,
        tracked.track_id,
        tracked.name,
        tracked.correlation,
        tracked.ts_ns
    from tracked
    left join flow_sources
        on
            tracked.trace_id = flow_sources.trace_id
            and tracked.slice_id = flow_sources.slice_out
    where
        not tracked.is_gpu
        and (tracked.correlation is not null or flow_sources.slice_out is not null)
),

{# The slices kept (see above). #}
kept as (
    select *
    from tracked
    where
        is_gpu
        or frame_kind is not null
        or name like 'c10d::%'
        or name like 'gloo:%'
        or {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
),

gpu_slices as (
    select
        trace_id,
        slice_id,
        correlation
    from kept
    where is_gpu
),

launches_by_flow as (
    select
        trace_id,
        slice_in as slice_id,
        min(slice_out) as launch_slice_id
    from flows
    group by 1, 2
),

launches_by_correlation as (
    select
        gpu_slices.trace_id,
        gpu_slices.slice_id,
        min(cpu_slices.slice_id) as launch_slice_id
    from gpu_slices
    inner join cpu_slices
        on
            gpu_slices.trace_id = cpu_slices.trace_id
            and gpu_slices.correlation = cpu_slices.correlation
    group by 1, 2
),

gpu_launches as (
    select
        gpu_slices.trace_id,
        gpu_slices.slice_id,
        coalesce(
            launches_by_flow.launch_slice_id, launches_by_correlation.launch_slice_id
        ) as launch_slice_id,
        case
            when launches_by_flow.launch_slice_id is not null then 'flow'
            when launches_by_correlation.launch_slice_id is not null then 'correlation'
        end as launch_source
    from gpu_slices
    left join launches_by_flow
        on
            gpu_slices.trace_id = launches_by_flow.trace_id
            and gpu_slices.slice_id = launches_by_flow.slice_id
    left join launches_by_correlation
        on
            gpu_slices.trace_id = launches_by_correlation.trace_id
            and gpu_slices.slice_id = launches_by_correlation.slice_id
    where
        launches_by_flow.launch_slice_id is not null
        or launches_by_correlation.launch_slice_id is not null
),

launches as (
    select
        gpu_launches.trace_id,
        gpu_launches.slice_id,
        gpu_launches.launch_slice_id,
        gpu_launches.launch_source,
        cpu_slices.name as launch_name,
        cpu_slices.track_id as launch_track_id,
        cpu_slices.ts_ns as launch_ts_ns
    from gpu_launches
    inner join cpu_slices
        on
            gpu_launches.trace_id = cpu_slices.trace_id
            and gpu_launches.launch_slice_id = cpu_slices.slice_id
),

{# A CPU slice is placed in time by its own start, GPU work by its launch's. #}
anchored as (
    select
        kept.*,
        launches.launch_slice_id,
        launches.launch_source,
        launches.launch_name,
        launches.launch_track_id,
        launches.launch_ts_ns,
        case when kept.is_gpu then launches.launch_ts_ns else kept.ts_ns end as anchor_ns
    from kept
    left join launches
        on
            kept.trace_id = launches.trace_id
            and kept.slice_id = launches.slice_id
),

{# Steps per trace are few (one per profiled iteration), so this range join
   costs slices x steps-per-trace, never slices x slices. #}
anchor_steps as (
    select
        anchored.trace_id,
        anchored.slice_id,
        max(profiler_steps.step_number) as step_number
    from anchored
    inner join profiler_steps
        on
            anchored.trace_id = profiler_steps.trace_id
            and anchored.anchor_ns >= profiler_steps.ts_ns
            and anchored.anchor_ns < profiler_steps.end_ns
    group by 1, 2
),

stepped as (
    select
        anchored.*,
        traces.min_profiler_step is not null as has_steps,
        coalesce(traces.iteration, {{ var('default_iteration') }}) as trace_iteration,
        anchor_steps.step_number
    from anchored
    inner join traces
        on anchored.trace_id = traces.trace_id
    left join anchor_steps
        on
            anchored.trace_id = anchor_steps.trace_id
            and anchored.slice_id = anchor_steps.slice_id
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
            when name like '%): %' then substring(name, 1, strpos(name, '(') - 1)
        end as frame_file,
        case
            when name like '%): %' then substring(name, strpos(name, '): ') + 3)
        end as frame_function,
        case when has_steps then step_number else trace_iteration end as iteration,
        (has_steps and step_number is null) as is_outside_steps,
        launch_slice_id,
        launch_source,
        launch_name,
        launch_track_id,
        launch_ts_ns,
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
