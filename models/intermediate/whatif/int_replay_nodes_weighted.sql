{#
    One row per replay node (node_id): the weights the replay walks with,
    taken from measured times once, here, so that the replay itself reads
    none (int_replay_ops_replayed).

      * start_ready_ns / end_ready_ns: the latest measured time among the
        node's start / end dependencies (int_replay_edges_typed), NULL
        without any;
      * start_delay_ns = start - start_ready (the straggler what-if paper's
        launch delay: what happens between the dependencies being met and
        the op starting, e.g. launch latency, host work between calls);
      * work_ns: the node's own duration when nothing ends it from outside
        (a compute kernel, a runtime call), else 0;
      * own_ns = end - greatest(start + work, end_ready): for a collective
        member, its transfer after the last arrival; for a host sync, the
        return after the GPU op it waited for.
    Negative values (a measured start before a dependency's measured end:
    a clock offset the alignment missed, an inferred edge that does not
    hold) are set to 0 and counted by `is_inconsistent`.
    The iteration_start node keeps its measured start (anchor_ns): where
    each rank's iteration starts is the one measured time the replay uses.
    A table rebuilt each time.
#}

with

nodes as (
    select * from {{ ref('int_replay_nodes_listed') }}
),

edges as (
    select
        src_node_id,
        src_point,
        dst_node_id,
        dst_point
    from {{ ref('int_replay_edges_typed') }}
),

ready as (
    select
        edges.dst_node_id as node_id,
        max(
            case when edges.src_point = 'end' then sources.end_ns else sources.start_ns end
        ) filter (where edges.dst_point = 'start') as start_ready_ns,
        max(
            case when edges.src_point = 'end' then sources.end_ns else sources.start_ns end
        ) filter (where edges.dst_point = 'end') as end_ready_ns
    from edges
    inner join nodes as sources
        on edges.src_node_id = sources.node_id
    group by 1
),

weighed as (
    select
        nodes.*,
        ready.start_ready_ns,
        ready.end_ready_ns,
        nodes.start_ns - coalesce(ready.start_ready_ns, nodes.start_ns) as raw_delay_ns,
        case
            when ready.end_ready_ns is null then nodes.end_ns - nodes.start_ns else 0
        end as work_ns
    from nodes
    left join ready
        on nodes.node_id = ready.node_id
),

final as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        collective_id,
        device,
        gpu_stream,
        start_ns,
        end_ns,
        start_ready_ns,
        end_ready_ns,
        case when node_kind = 'iteration_start' then start_ns end as anchor_ns,
        greatest(raw_delay_ns, 0) as start_delay_ns,
        work_ns,
        greatest(
            end_ns - greatest(start_ns + work_ns, coalesce(end_ready_ns, start_ns)), 0
        ) as own_ns,
        raw_delay_ns < 0
        or end_ns < greatest(start_ns + work_ns, coalesce(end_ready_ns, start_ns))
            as is_inconsistent
    from weighed
)

select * from final
