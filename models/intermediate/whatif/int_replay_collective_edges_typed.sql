{#
    One row per `collective` edge of the replay graph (src_node_id,
    src_point, dst_node_id, dst_point), the edges that cross ranks: each
    member's start -> its instance (int_replay_collectives_listed: it
    happens at the last arrival), and the instance -> each member's end
    (every member ends after the last arrival plus its own transfer; a
    c10d call of a trace without GPU ops that returned before the last
    arrival gets no such edge: it did not wait, as a gloo broadcast's
    root or an async call does not); a
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
        slice_id,
        offset_ns
    from {{ ref('int_replay_members_paired') }}
),

ops as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        end_ns
    from {{ ref('int_replay_ops_listed') }}
    where node_kind in ('gpu_communication', 'host_communication')
),

instances as (
    select
        node_id,
        run_id,
        collective_id,
        start_ns
    from {{ ref('int_replay_collectives_listed') }}
),

member_nodes as (
    select
        ops.node_id as member_node_id,
        instances.node_id as instance_node_id,
        ops.run_id,
        ops.iteration,
        ops.rank,
        ops.trace_id,
        {# A c10d call that returned before the last member arrived did not
           wait for the others (a gloo broadcast's root, an async call). #}
        ops.node_kind = 'host_communication'
        and ops.end_ns + coalesce(members.offset_ns, 0) < instances.start_ns as is_returned_early
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
        where='not is_returned_early',
    ) }}
),

final as (
    select * from arrival_edges
    union all
    select * from departure_edges
)

select * from final
