{#
    One row per run x rank x iteration x phase x microbatch (microbatch NULL
    for phases outside forward/backward steps): Megatron-TraceViz's per-MBS
    view, wall, busy, compute, communication and overlap of the group's
    kernels (timing_source gpu), or of the outermost Megatron step frames on
    traces without GPU work (cpu), with the microbatch's vpp chunk.
    int_microbatch_phases_timed computes them and documents the rules; the
    rank's coordinates come from dim_ranks (macro rank_coordinates).
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization):
    a per-run lookup joined into an intermediate table costs less at read
    time than writing the table again on every build.
#}

{{ config(materialized=lookup_join_materialization()) }}

with

phases as (
    select * from {{ ref('int_microbatch_phases_timed') }}  -- noqa: AM04
),

ranks as (
    select * from {{ ref('dim_ranks') }}  -- noqa: AM04
),

final as (
    select
        phases.run_id,
        phases.rank,
        {{ rank_coordinates('ranks') }},
        phases.iteration,
        phases.phase,
        phases.microbatch,
        phases.vpp_chunk,
        phases.chunk_microbatch,
        phases.timing_source,
        phases.kernel_count,
        phases.first_start_ns,
        phases.last_end_ns,
        phases.wall_ns,
        phases.busy_ns,
        phases.compute_ns,
        phases.communication_ns,
        phases.memory_ns,
        phases.overlap_ns
    from phases
    left join ranks
        on
            phases.run_id = ranks.run_id
            and phases.rank = ranks.rank
)

select * from final
