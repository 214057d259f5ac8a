{#
    One row per GPU kernel, copy or fill: run x rank x kernel, key
    (trace_id, slice_id). The per-trace kernel table (int_kernels_classified:
    launch, iteration, kind, phase, microbatch) placed in the run's layout:
    the vpp chunk and Megatron's microbatch within the chunk of the kernel's
    microbatch step (int_microbatch_steps_chunked), and its communication
    group (int_process_groups_matched), and an Nsight kernel's short name
    (int_kernel_short_names_extracted; a Kineto kernel's is its name). fct_kernels
    shows it; the models that
    need a kernel's group (int_bubble_parts_swept, int_comm_calls_matched)
    read it here, so the rule lives once and no intermediate model reads a
    mart.

    A view on DuckDB, a table elsewhere (macro lookup_join_materialization):
    the per-run lookups join into the per-trace table at read time, so that
    a new trace or topology file never recomputes the per-trace table.

    comm_group_kind (communication kernels only): the `process_group_kinds`
    seed on the kernel's `Process Group Description`, else the matched
    group's kind, else the comm_group_kind of the winning step pattern (seed
    megatron_step_patterns); comm_group_source says which.
#}

{{ config(materialized=lookup_join_materialization()) }}

with

kernels as (
    select * from {{ ref('int_kernels_classified') }}
),

short_names as (
    select
        trace_id,
        slice_id,
        short_name
    from {{ ref('int_kernel_short_names_extracted') }}
),

chunks as (
    select
        trace_id,
        slice_id as step_slice_id,
        vpp_chunk,
        chunk_microbatch
    from {{ ref('int_microbatch_steps_chunked') }}
),

comm_groups as (
    select
        run_id,
        rank,
        process_group_desc,
        process_group_name,
        process_group_ranks_key,
        desc_group_kind,
        matched_group_kind,
        matched_group_index,
        matched_kind
    from {{ ref('int_process_groups_matched') }}
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.name,
        coalesce(short_names.short_name, kernels.name) as short_name,
        kernels.category,
        kernels.kind,
        kernels.comm_op,
        kernels.phase,
        case
            when kernels.kind = 'communication'
                then coalesce(
                    comm_groups.desc_group_kind,
                    nullif(comm_groups.matched_kind, 'other'),
                    kernels.phase_group_kind
                )
        end as comm_group_kind,
        case
            when kernels.kind = 'communication' and comm_groups.matched_group_kind is not null
                then 'process_group'
            when kernels.kind = 'communication' and comm_groups.desc_group_kind is not null
                then 'process_group_desc'
            when kernels.kind = 'communication' and kernels.phase_group_kind is not null
                then 'phase'
        end as comm_group_source,
        comm_groups.matched_group_kind as comm_process_group_kind,
        comm_groups.matched_group_index as comm_group_index,
        kernels.iteration,
        kernels.microbatch,
        case when kernels.microbatch is not null then chunks.vpp_chunk end as vpp_chunk,
        case when kernels.microbatch is not null then chunks.chunk_microbatch end
            as chunk_microbatch,
        kernels.is_outside_steps,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.collective_name,
        kernels.process_group_name,
        kernels.process_group_desc,
        kernels.process_group_ranks_key,
        kernels.dtype,
        kernels.group_size,
        kernels.in_msg_nelems,
        kernels.out_msg_nelems,
        kernels.launch_slice_id,
        kernels.launch_source,
        kernels.launch_name,
        kernels.annotation_slice_id,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns
    from kernels
    left join short_names
        on
            kernels.trace_id = short_names.trace_id
            and kernels.slice_id = short_names.slice_id
    left join chunks
        on
            kernels.trace_id = chunks.trace_id
            and kernels.step_slice_id = chunks.step_slice_id
    left join comm_groups
        on
            kernels.kind = 'communication'
            and kernels.run_id = comm_groups.run_id
            and kernels.rank = comm_groups.rank
            and kernels.process_group_desc is not distinct from comm_groups.process_group_desc
            and kernels.process_group_name is not distinct from comm_groups.process_group_name
            and kernels.process_group_ranks_key
            is not distinct from comm_groups.process_group_ranks_key
)

select * from final
