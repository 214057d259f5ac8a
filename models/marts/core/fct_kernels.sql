{#
    One row per GPU kernel, copy or fill: run x rank x kernel. The per-trace
    kernel table with the run's lookups (vpp chunk, communication group)
    joined in, as int_kernels_placed places them (the rules live there, so
    that no intermediate model reads a mart).
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        short_name,
        category,
        kind,
        comm_op,
        phase,
        comm_group_kind,
        comm_group_source,
        comm_process_group_kind,
        comm_group_index,
        iteration,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        is_outside_steps,
        device,
        stream,
        correlation,
        collective_name,
        process_group_name,
        process_group_desc,
        process_group_ranks_key,
        dtype,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        launch_slice_id,
        launch_source,
        launch_name,
        annotation_slice_id,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_placed') }}
)

select * from final
