"""One row per what-if scenario x run x rank x iteration: the replayed GPU span.

Each scenario of int_whatif_work_scaled replaces some nodes' work; the graph
(int_replay_nodes_weighted, int_replay_edges_typed) is replayed once per
scenario with tracehouse.core.replay, and each rank's GPU span in each
iteration (first GPU start to last GPU end, fct_step_replay's rule) is
kept. A dbt Python model for the same reason as int_replay_ops_replayed.
A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import graph_from_relations, replay


def model(dbt, session):
    """dbt-duckdb entry point: one replay per scenario, spans per rank and iteration."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_weighted")
    node_id, graph = graph_from_relations(nodes, dbt.ref("int_replay_edges_typed"))
    facts = nodes.select(
        "node_id, run_id, rank, iteration, node_kind like 'gpu_%' as is_gpu"
    ).order("node_id").df()
    gpu = facts[facts.is_gpu.to_numpy()]
    scaled = dbt.ref("int_whatif_work_scaled").select("scenario, node_id, work_ns").df()
    tables = []
    for scenario, rows in scaled.groupby("scenario"):
        work = graph.work.copy()
        work[rows.node_id.to_numpy() - 1] = rows.work_ns.to_numpy()
        start, end = replay(graph, work)
        index = gpu.node_id.to_numpy() - 1
        spans = gpu.assign(start_ns=start[index], end_ns=end[index]).groupby(
            ["run_id", "rank", "iteration"]).agg(first=("start_ns", "min"), last=("end_ns", "max"))
        spans = spans.reset_index()
        tables.append(pa.table({
            "scenario": pa.array([scenario] * len(spans), pa.string()),
            "run_id": pa.array(spans.run_id, pa.string()),
            "rank": pa.array(spans["rank"].astype(np.int64)),
            "iteration": pa.array(spans.iteration.astype(np.int64)),
            "replayed_span_ns": pa.array((spans["last"] - spans["first"]).astype(np.int64)),
        }))
    if not tables:
        return pa.table({"scenario": pa.array([], pa.string()), "run_id": pa.array([], pa.string()),
                         "rank": pa.array([], pa.int64()), "iteration": pa.array([], pa.int64()),
                         "replayed_span_ns": pa.array([], pa.int64())})
    return pa.concat_tables(tables)
