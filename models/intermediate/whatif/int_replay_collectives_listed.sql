{#
    One row per collective or P2P instance of the replay graph (node_id):
    a `collective` node (int_replay_members_paired: a matched
    collective, or a send/recv pair, P2P paired by the schedule where the
    calls name no peer), at the moment its last member
    arrives on the reference clock (each member's start in
    int_replay_ops_listed plus its rank's clock offset). The replay
    computes the instance's own time; this measured one only weighs its
    members' transfers. node_id hashes the run and collective id
    (macros/replay_edges.sql). The part of the graph that crosses ranks:
    a table rebuilt each time, with int_replay_collective_edges_typed;
    the per-trace rest is incremental (int_replay_ops_listed).
#}

with

members as (
    select
        run_id,
        collective_id,
        trace_id,
        slice_id,
        iteration,
        offset_ns
    from {{ ref('int_replay_members_paired') }}
),

ops as (
    select
        trace_id,
        slice_id,
        ts_ns
    from {{ ref('int_replay_ops_listed') }}
    where node_kind in ('gpu_communication', 'host_communication')
),

instances as (
    select
        members.run_id,
        members.collective_id,
        min(members.iteration) as iteration,
        max(ops.ts_ns + coalesce(members.offset_ns, 0)) as start_ns
    from members
    inner join ops
        on
            members.trace_id = ops.trace_id
            and members.slice_id = ops.slice_id
    group by 1, 2
),

final as (
    select
        {{ replay_node_id('run_id', "'collective'", 'collective_id') }} as node_id,
        run_id,
        cast(null as bigint) as rank,
        iteration,
        'collective' as node_kind,
        cast(null as varchar) as trace_id,
        cast(null as bigint) as slice_id,
        collective_id,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        start_ns,
        start_ns as end_ns
    from instances
)

select * from final
