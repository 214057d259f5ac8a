{#
    One row per GPU kernel, copy or fill (trace_id, slice_id): launched and
    classified. Its launch and iteration come from int_slices_contextualized,
    its kind from int_kernel_names_classified, and its training phase and
    microbatch from int_kernel_phases_matched (the Megatron step frames
    around its CPU launch, else torch's own signals: the rules are there);
    a kernel without a match is `other`, with no microbatch.
    The process group a communication kernel's args name (description,
    name, `process_group_ranks_key` = sorted ranks) is resolved against the
    run's groups by int_process_groups_matched, a per-run lookup that
    fct_kernels joins in.
    With var('capture_window_start_ns' / 'capture_window_end_ns') set, only
    GPU work wholly inside that window of the capture clock is kept (the
    rows of every model below; `tracehouse nsys --trim` builds a fresh
    warehouse with them). Every column depends on the kernel's own trace
    only, so the model is per trace (materialized per_trace): keyed by
    trace_id.
    Both joins are left joins with the wide kernel rows on the probe side:
    DuckDB builds the hash tables on the kind dictionary and the narrow
    phase table, and streams the kernels through (int_kernel_phases_matched
    says why that is a model of its own). A kernel without a name has no
    kind row and is left out, as an inner join on the name would.
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The traces to compute, read once for every scan (macros/per_trace.sql). -#}
{%- set new_traces = trace_filter(traces_pending()) %}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        category,
        name,
        device,
        stream,
        correlation,
        collective_name,
        process_group_name,
        process_group_desc,
        process_group_ranks,
        dtype,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        launch_slice_id,
        launch_source,
        launch_name,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
        annotation_slice_id,
        iteration,
        is_outside_steps,
        ts_ns,
        dur_ns,
        end_ns
    {#- Aliased only where the window's subqueries name it (sqlfluff: AL05). #}
    {%- set windowed = var('capture_window_start_ns') is not none
        or var('capture_window_end_ns') is not none %}
    from {{ ref('int_slices_contextualized') }}{{ ' as contextualized' if windowed }}
    where
        category in (
            {%- for category in var('kernel_categories') %}
                '{{ category }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
        {#- Every named kernel has its kind row (int_kernel_names_classified
            reads the same rows); a nameless one has none. #}
        and name is not null
        {#- var('capture_window_*'): macros/capture_window.sql. #}
        and {{ new_traces }}{{ capture_window_conditions('contextualized') }}
),

kernel_names as (
    select
        category,
        name,
        kind,
        pattern_id,
        comm_op
    from {{ ref('int_kernel_names_classified') }}
),

kernel_phases as (
    select
        trace_id,
        slice_id,
        phase,
        phase_group_kind,
        microbatch,
        step_slice_id
    from {{ ref('int_kernel_phases_matched') }}
    where {{ new_traces }}
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.name,
        kernels.category,
        kernel_names.kind,
        kernel_names.pattern_id as kind_pattern_id,
        kernel_names.comm_op,
        coalesce(kernel_phases.phase, 'other') as phase,
        kernel_phases.phase_group_kind,
        kernels.iteration,
        kernel_phases.microbatch,
        kernel_phases.step_slice_id,
        kernels.is_outside_steps,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.collective_name,
        kernels.process_group_name,
        kernels.process_group_desc,
        case
            when kernels.process_group_ranks is not null
                then {{ sorted_array_key('kernels.process_group_ranks') }}
        end as process_group_ranks_key,
        kernels.dtype,
        kernels.group_size,
        kernels.in_msg_nelems,
        kernels.out_msg_nelems,
        kernels.launch_slice_id,
        kernels.launch_source,
        kernels.launch_name,
        kernels.launch_track_id,
        kernels.launch_ts_ns,
        kernels.launch_end_ns,
        kernels.annotation_slice_id,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns
    from kernels
    left join kernel_phases
        on
            kernels.trace_id = kernel_phases.trace_id
            and kernels.slice_id = kernel_phases.slice_id
    left join kernel_names
        on
            kernels.category = kernel_names.category
            and kernels.name = kernel_names.name
)

select * from final
