{#
    One row per run x rank x iteration x phase x microbatch (microbatch NULL
    for phases outside forward/backward steps): Megatron-TraceViz's per-MBS
    view, wall, busy, compute, communication and overlap of the group's
    kernels (timing_source gpu), or of the outermost Megatron step frames on
    traces without GPU work (cpu), with the microbatch's vpp chunk.
    int_microbatch_phases_timed computes them and documents the rules.
#}

with

final as (
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        timing_source,
        kernel_count,
        first_start_ns,
        last_end_ns,
        wall_ns,
        busy_ns,
        compute_ns,
        communication_ns,
        memory_ns,
        overlap_ns
    from {{ ref('int_microbatch_phases_timed') }}
)

select * from final
