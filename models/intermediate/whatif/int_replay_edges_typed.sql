{#
    One row per dependency edge of the replay graph (edge_type, src_node_id,
    src_point, dst_node_id, dst_point), between the nodes of
    int_replay_nodes_listed: the edges within a trace
    (int_replay_trace_edges_typed, incremental per trace: step_start,
    cpu_order, launch, stream_order, comm_stream_wait, gpu_wait, host_sync,
    cuda_event_wait, cuda_host_sync) and the collective edges across ranks
    (int_replay_collective_edges_typed, rebuilt each time); each model's
    docstring says what its kinds mean. Every edge carries its target's
    run, iteration, rank and trace (a collective instance's: its
    member's), so edges count per trace. A view: the replay models read it
    once each.
#}

{{ config(materialized='view') }}

with

trace_edges as (
    select
        edge_type,
        src_node_id,
        src_point,
        dst_node_id,
        dst_point,
        run_id,
        iteration,
        rank,
        trace_id
    from {{ ref('int_replay_trace_edges_typed') }}
),

collective_edges as (
    select
        edge_type,
        src_node_id,
        src_point,
        dst_node_id,
        dst_point,
        run_id,
        iteration,
        rank,
        trace_id
    from {{ ref('int_replay_collective_edges_typed') }}
),

final as (
    select * from trace_edges
    union all
    select * from collective_edges
)

select * from final
