{#
    One row per Megatron step frame on a CPU thread (trace_id, slice_id):
    forward, backward, recompute, pp_p2p, dp_sync and optimizer frames as
    int_cpu_steps_classified finds them, with the vpp chunk and Megatron's
    microbatch within the chunk of microbatch steps
    (int_microbatch_steps_chunked) and the thread they ran on. What
    timelines and the Perfetto export draw on a rank's CPU tracks; the
    aggregates per microbatch are in fct_microbatch_phases.
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

steps as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        tid,
        thread_name,
        iteration,
        phase,
        pattern_id,
        file_path,
        function_name,
        is_outermost,
        microbatch,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
),

chunks as (
    select
        trace_id,
        slice_id,
        vpp_chunk,
        chunk_microbatch
    from {{ ref('int_microbatch_steps_chunked') }}
),

final as (
    select
        steps.run_id,
        steps.rank,
        steps.trace_id,
        steps.slice_id,
        steps.track_id,
        steps.tid,
        steps.thread_name,
        steps.iteration,
        steps.phase,
        steps.pattern_id,
        steps.file_path,
        steps.function_name,
        steps.is_outermost,
        steps.microbatch,
        chunks.vpp_chunk,
        chunks.chunk_microbatch,
        steps.ts_ns,
        steps.end_ns - steps.ts_ns as dur_ns,
        steps.end_ns
    from steps
    left join chunks
        on
            steps.trace_id = chunks.trace_id
            and steps.slice_id = chunks.slice_id
)

select * from final
