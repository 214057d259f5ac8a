"""One row per replay node (node_id): its replayed start and end.

The replay of int_replay_nodes_weighted over int_replay_edges_typed, as
tracehouse.core.replay walks it: every start and end recomputed from the
nodes' delays, work and own times and the edges, from each rank's
iteration start (the one measured time read). A dbt Python model because
the walk is a longest path, which a recursive CTE does badly (DuckDB's
recursion keeps rows per path, not a maximum per node); the NumPy frontier
sweep runs once per level of the graph (benchmarks/whatif.py measures it).
Set-based work (listing nodes, inferring edges, weights) stays in SQL; this
model only walks. A table rebuilt each time.
"""

from __future__ import annotations

import pyarrow as pa

from tracehouse.core.replay import graph_from_relations, replay


def model(dbt, session):
    """dbt-duckdb entry point: read the weighted nodes and edges, replay, return a table."""
    dbt.config(materialized="table")
    node_id, graph = graph_from_relations(dbt.ref("int_replay_nodes_weighted"),
                                          dbt.ref("int_replay_edges_typed"))
    start, end = replay(graph)
    return pa.table({"node_id": node_id, "replayed_start_ns": start, "replayed_end_ns": end})
