{#
    One row per `collective` edge of the replay graph (src_node_id,
    src_point, dst_node_id, dst_point), the edges that cross ranks: each
    member's start -> its instance (int_replay_collectives_listed: it
    happens at the last arrival), and the instance -> each member's end
    (every member ends after the last arrival plus its own transfer); a
    P2P send/recv pair is a two-member instance (int_replay_members_paired). The edges count on the
    member's run, iteration, rank and trace. A table rebuilt each time;
    int_replay_edges_typed adds the per-trace edges
    (int_replay_trace_edges_typed).
#}

with

members as (
    select
        run_id,
        collective_id,
        trace_id,
        slice_id
    from {{ ref('int_replay_members_paired') }}
),

ops as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        trace_id,
        slice_id
    from {{ ref('int_replay_ops_listed') }}
    where node_kind = 'gpu_communication'
),

instances as (
    select
        node_id,
        run_id,
        collective_id
    from {{ ref('int_replay_collectives_listed') }}
),

member_nodes as (
    select
        ops.node_id as member_node_id,
        instances.node_id as instance_node_id,
        ops.run_id,
        ops.iteration,
        ops.rank,
        ops.trace_id
    from members
    inner join ops
        on
            members.trace_id = ops.trace_id
            and members.slice_id = ops.slice_id
    inner join instances
        on
            members.run_id = instances.run_id
            and members.collective_id = instances.collective_id
),

arrival_edges as (
    {{ replay_edges(
        'collective', 'member_nodes', 'member_node_id', 'instance_node_id',
        src_point='start',
    ) }}
),

departure_edges as (
    {{ replay_edges(
        'collective', 'member_nodes', 'instance_node_id', 'member_node_id', dst_point='end',
    ) }}
),

final as (
    select * from arrival_edges
    union all
    select * from departure_edges
)

select * from final
