{#
    One row per GPU kernel, copy or fill (trace_id, slice_id), with its kind,
    its CPU launch and its iteration.

    Launch: the `ac2g` flow into the kernel when there is one (CUDA graphs
    share one correlation id across many kernels), else the CPU-side slice
    of the same trace with the same correlation id.
    Iteration: the number N of the `ProfilerStep#N` range that holds the
    launch's start. A trace without ProfilerStep ranges is one iteration: its
    `iteration_N` folder, else var('default_iteration'). In a trace with
    steps, a kernel without a launch or launched outside every step keeps a
    NULL iteration (it is still counted: `is_outside_steps`).
    Interval bounds: `interval_start_ns`/`interval_end_ns` are the kernel's
    start rounded up and end rounded down to var('kernel_time_unit_ns'): 1
    (default) keeps ns exactly; 1000 reproduces Holistic Trace Analysis,
    which rounds ns-resolution traces inward to whole microseconds (a
    sub-microsecond kernel then gets a negative length, as in HTA).
    Incremental by trace (macros/incremental_traces.sql): a build computes
    the kernels of new traces only and deletes those of unloaded ones.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete('trace') }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

slices as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        category,
        name,
        correlation,
        device,
        stream,
        process_group_desc,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('stg_lake__slices') }}
    where {{ incremental_traces_where('trace') }}
),

threads as (
    select
        trace_id,
        track_id,
        is_gpu
    from {{ ref('stg_lake__threads') }}
    where {{ incremental_traces_where('trace') }}
),

flows as (
    select
        trace_id,
        slice_out,
        slice_in
    from {{ ref('stg_lake__flows') }}
    where
        category = '{{ var("launch_flow_category") }}'
        and {{ incremental_traces_where('trace') }}
),

traces as (
    select
        trace_id,
        iteration,
        min_profiler_step
    from {{ ref('stg_lake__traces') }}
    where {{ incremental_traces_where('trace') }}
),

profiler_steps as (
    select
        trace_id,
        step_number,
        ts_ns,
        end_ns
    from {{ ref('int_profiler_steps') }}
    where {{ incremental_traces_where('trace') }}
),

kernel_names as (
    select
        category,
        name,
        kind,
        pattern_id
    from {{ ref('int_kernel_names_classified') }}
),

kernels as (
    select *
    from slices
    where category in (
        {%- for category in var('kernel_categories') %}
            '{{ category }}'{{ "," if not loop.last }}
        {%- endfor %}
    )
),

cpu_slices as (
    select
        slices.trace_id,
        slices.slice_id,
        slices.track_id,
        slices.name,
        slices.correlation,
        slices.ts_ns,
        slices.end_ns
    from slices
    inner join threads
        on
            slices.trace_id = threads.trace_id
            and slices.track_id = threads.track_id
    where not coalesce(threads.is_gpu, false)
),

launches_by_flow as (
    select
        trace_id,
        slice_in as kernel_slice_id,
        min(slice_out) as launch_slice_id
    from flows
    group by 1, 2
),

launches_by_correlation as (
    select
        kernels.trace_id,
        kernels.slice_id as kernel_slice_id,
        min(cpu_slices.slice_id) as launch_slice_id
    from kernels
    inner join cpu_slices
        on
            kernels.trace_id = cpu_slices.trace_id
            and kernels.correlation = cpu_slices.correlation
    group by 1, 2
),

kernel_launches as (
    select
        kernels.trace_id,
        kernels.slice_id,
        coalesce(
            launches_by_flow.launch_slice_id, launches_by_correlation.launch_slice_id
        ) as launch_slice_id,
        case
            when launches_by_flow.launch_slice_id is not null then 'flow'
            when launches_by_correlation.launch_slice_id is not null then 'correlation'
        end as launch_source
    from kernels
    left join launches_by_flow
        on
            kernels.trace_id = launches_by_flow.trace_id
            and kernels.slice_id = launches_by_flow.kernel_slice_id
    left join launches_by_correlation
        on
            kernels.trace_id = launches_by_correlation.trace_id
            and kernels.slice_id = launches_by_correlation.kernel_slice_id
),

launches as (
    select
        kernel_launches.trace_id,
        kernel_launches.slice_id,
        kernel_launches.launch_slice_id,
        kernel_launches.launch_source,
        cpu_slices.name as launch_name,
        cpu_slices.track_id as launch_track_id,
        cpu_slices.ts_ns as launch_ts_ns
    from kernel_launches
    left join cpu_slices
        on
            kernel_launches.trace_id = cpu_slices.trace_id
            and kernel_launches.launch_slice_id = cpu_slices.slice_id
),

{# Steps per trace are few (one per profiled iteration), so this range join
   costs launches x steps-per-trace, never kernels x kernels. #}
launch_steps as (
    select
        launches.trace_id,
        launches.slice_id,
        max(profiler_steps.step_number) as step_number
    from launches
    inner join profiler_steps
        on
            launches.trace_id = profiler_steps.trace_id
            and launches.launch_ts_ns >= profiler_steps.ts_ns
            and launches.launch_ts_ns < profiler_steps.end_ns
    group by 1, 2
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.category,
        kernels.name,
        kernel_names.kind,
        kernel_names.pattern_id as kind_pattern_id,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.process_group_desc,
        launches.launch_slice_id,
        launches.launch_source,
        launches.launch_name,
        launches.launch_track_id,
        launches.launch_ts_ns,
        case
            when traces.min_profiler_step is null
                then coalesce(traces.iteration, {{ var('default_iteration') }})
            else launch_steps.step_number
        end as iteration,
        (
            traces.min_profiler_step is not null and launch_steps.step_number is null
        ) as is_outside_steps,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns,
        {{ round_up_to_unit('kernels.ts_ns', var('kernel_time_unit_ns')) }} as interval_start_ns,
        {{ round_down_to_unit('kernels.end_ns', var('kernel_time_unit_ns')) }} as interval_end_ns
    from kernels
    inner join kernel_names
        on
            kernels.category = kernel_names.category
            and kernels.name = kernel_names.name
    left join launches
        on
            kernels.trace_id = launches.trace_id
            and kernels.slice_id = launches.slice_id
    left join launch_steps
        on
            kernels.trace_id = launch_steps.trace_id
            and kernels.slice_id = launch_steps.slice_id
    left join traces
        on kernels.trace_id = traces.trace_id
)

select * from final
