{#
    One row per GPU kernel, copy or fill: run x rank x kernel, with phase,
    microbatch, vpp chunk, microbatch within the chunk and communication
    group from int_kernels_phased.
#}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        category,
        name,
        kind,
        device,
        stream,
        correlation,
        process_group_desc,
        launch_slice_id,
        launch_source,
        launch_name,
        iteration,
        is_outside_steps,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_launched') }}
),

phases as (
    select
        trace_id,
        slice_id,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        comm_group_kind,
        comm_group_source,
        comm_process_group_kind,
        comm_group_index
    from {{ ref('int_kernels_phased') }}
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.name,
        kernels.category,
        kernels.kind,
        phases.phase,
        phases.comm_group_kind,
        phases.comm_group_source,
        phases.comm_process_group_kind,
        phases.comm_group_index,
        kernels.iteration,
        phases.microbatch,
        phases.vpp_chunk,
        phases.chunk_microbatch,
        kernels.is_outside_steps,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.process_group_desc,
        kernels.launch_slice_id,
        kernels.launch_source,
        kernels.launch_name,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns
    from kernels
    left join phases
        on
            kernels.trace_id = phases.trace_id
            and kernels.slice_id = phases.slice_id
)

select * from final
