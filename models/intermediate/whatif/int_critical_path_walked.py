"""One row per vertex on each iteration's critical path (run_id, iteration, path_step).

The critical path across ranks, as HTA's critical_path_analysis finds it
on one rank, here over the whole replay graph: from the GPU op that ends
last in the iteration (any rank) back along the edges that set each
replayed time (tracehouse.core.replay.binding_predecessors) to a rank's
iteration start. Each vertex is a node's start or end; segment_ns is the
time from the previous vertex on the path: at a start, the node's delay
after its binding dependency (`delay`); at an end, its own work (`work`)
or, where something else ended it (a collective's last arrival, the GPU op
a host sync waited for), its own transfer or return after that (`wait`).
The segments add up to the path's length, the iteration's replayed span
from that rank's start. A dbt Python model: the walk follows one pointer
per step, which NumPy arrays do in microseconds and a recursive CTE would
do with a join of the whole graph per step. It weighs and replays the
graph itself (about a second at 256 ranks) rather than reading a table of
every node's replayed times, which cost more to write and read than to
recompute. A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import (
    binding_predecessors,
    graph_from_relations,
    node_indices,
    replay,
    walk_back,
)


def model(dbt, session):
    """dbt-duckdb entry point: walk back from every run x iteration's last GPU end."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_listed")
    node_id, graph = graph_from_relations(nodes, dbt.ref("int_replay_edges_typed"))
    start, end = replay(graph)
    predecessor = binding_predecessors(graph, start, end)
    value = np.empty(2 * graph.size, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    # The GPU op ending last in each run x iteration (ties: the highest node id).
    ends = session.from_arrow(pa.table({"node_id": node_id, "replayed_end_ns": end}))
    sinks = (nodes.filter("node_kind like 'gpu_%'").select("node_id, run_id, iteration")
             .join(ends, "node_id")
             .aggregate("run_id, iteration, "
                        "arg_max(node_id, (replayed_end_ns, node_id)) as sink_node_id",
                        "run_id, iteration")
             .order("run_id, iteration").fetchall())
    columns: dict[str, list] = {name: [] for name in (
        "run_id", "iteration", "path_step", "node_id", "point", "segment", "segment_ns")}
    for run_id, iteration, sink_node_id in sinks:
        sink = int(node_indices(node_id, [sink_node_id])[0])
        path = walk_back(predecessor, 2 * sink + 1)
        previous = np.concatenate([[path[0]], path[:-1]])
        is_end = path % 2 == 1
        own_start = previous == path - 1
        segment = np.where(~is_end, "delay", np.where(own_start, "work", "wait"))
        segment[0] = "start"
        count = path.shape[0]
        columns["run_id"] += [run_id] * count
        columns["iteration"] += [int(iteration)] * count
        columns["path_step"] += list(range(count))
        columns["node_id"] += node_id[path // 2].tolist()
        columns["point"] += np.where(is_end, "end", "start").tolist()
        columns["segment"] += segment.tolist()
        columns["segment_ns"] += (value[path] - value[previous]).tolist()
    return pa.table({
        "run_id": pa.array(columns["run_id"], pa.string()),
        "iteration": pa.array(columns["iteration"], pa.int64()),
        "path_step": pa.array(columns["path_step"], pa.int64()),
        "node_id": pa.array(columns["node_id"], pa.int64()),
        "point": pa.array(columns["point"], pa.string()),
        "segment": pa.array(columns["segment"], pa.string()),
        "segment_ns": pa.array(columns["segment_ns"], pa.int64()),
    })
