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
do with a join of the whole graph per step. A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import binding_predecessors, graph_from_relations, walk_back


def model(dbt, session):
    """dbt-duckdb entry point: walk back from every run x iteration's last GPU end."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_weighted")
    node_id, graph = graph_from_relations(nodes, dbt.ref("int_replay_edges_typed"))
    replayed = dbt.ref("int_replay_ops_replayed").order("node_id").fetchnumpy()
    start = np.asarray(replayed["replayed_start_ns"], dtype=np.int64)
    end = np.asarray(replayed["replayed_end_ns"], dtype=np.int64)
    facts = nodes.select(
        "node_id, run_id, iteration, node_kind like 'gpu_%' as is_gpu").order("node_id").df()
    predecessor = binding_predecessors(graph, start, end)
    value = np.empty(2 * graph.size, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    gpu = facts[facts.is_gpu.to_numpy()].assign(end_ns=end[facts.is_gpu.to_numpy()])
    sinks = gpu.sort_values("end_ns", kind="stable").groupby(["run_id", "iteration"]).tail(1)
    columns: dict[str, list] = {name: [] for name in (
        "run_id", "iteration", "path_step", "node_id", "point", "segment", "segment_ns")}
    for index, sink in zip(sinks.index.to_numpy(), sinks.itertuples(index=False)):
        path = walk_back(predecessor, 2 * int(index) + 1)
        previous = np.concatenate([[path[0]], path[:-1]])
        is_end = path % 2 == 1
        own_start = previous == path - 1
        segment = np.where(~is_end, "delay", np.where(own_start, "work", "wait"))
        segment[0] = "start"
        count = path.shape[0]
        columns["run_id"] += [sink.run_id] * count
        columns["iteration"] += [int(sink.iteration)] * count
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
