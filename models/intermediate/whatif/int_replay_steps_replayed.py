"""One row per scenario x run x rank x iteration with GPU work: the replayed GPU span.

The graph (int_replay_nodes_listed, int_replay_edges_typed) is weighed
once (tracehouse.core.replay.weigh: delays, work and own times from the
measured times) and replayed once per scenario: `as_measured` with the
measured work (fct_step_replay checks it against the measured step), then
each scenario of int_whatif_work_scaled with its nodes' durations and
delays replaced (fct_what_if; tracehouse.core.replay_scenarios.apply_scenario
gives each to the right weight). Each rank's GPU span in each iteration
(first GPU start to last GPU end) is kept, with what the replay does not explain, counted
(scenario-independent: the graph's weights): the GPU ops' start delays,
GPU ops without a launch (anchored at the iteration start), nodes whose
measured times broke an edge.

One Python model for every replay, rather than a table of every node's
replayed times: at 256 ranks x 2 iterations that table held 2.6 M rows
which only these spans read, and each model reading the graph pays for
loading it (benchmarks/README.md, whatif.py). The walk is a longest path,
which a recursive CTE does badly (DuckDB's recursion keeps rows per path,
not a maximum per node); the per-rank aggregation stays in DuckDB (the
session), where the grouping is cheap. A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import graph_from_relations, node_indices, replay
from tracehouse.core.replay_scenarios import apply_scenario

#: The plain replay, with every node's measured work.
AS_MEASURED = "as_measured"

SPANS = """
    run_id,
    rank,
    iteration,
    count(*) filter (where is_gpu) as gpu_op_count,
    max(end_ns) filter (where is_gpu) - min(start_ns) filter (where is_gpu) as measured_span_ns,
    max(replayed_end_ns) filter (where is_gpu) - min(replayed_start_ns) filter (where is_gpu)
        as replayed_span_ns,
    coalesce(sum(start_delay_ns) filter (where is_gpu), 0)::bigint as start_delay_ns,
    count(*) filter (where is_gpu and is_unlaunched) as unlaunched_op_count,
    count(*) filter (where is_inconsistent) as inconsistent_node_count
"""


def model(dbt, session):
    """dbt-duckdb entry point: weigh the graph, replay each scenario, spans per rank."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_listed")
    node_id, graph = graph_from_relations(nodes, dbt.ref("int_replay_edges_typed"))
    # Only step_start edges leave a root: into a rank's first runtime call
    # and into every GPU op whose launch the trace lacks.
    is_unlaunched = np.zeros(graph.size, dtype=bool)
    is_unlaunched[graph.dst[graph.is_root[graph.src]]] = True
    facts = nodes.filter("rank is not null").select(
        "node_id, run_id, rank, iteration, node_kind like 'gpu_%' as is_gpu, start_ns, end_ns")
    # NULL (keep the replay's weight) as -1: apply_scenario's "keep".
    scaled = dbt.ref("int_whatif_work_scaled").select(
        "scenario, node_id, coalesce(work_ns, -1) as work_ns, "
        "coalesce(delay_ns, -1) as delay_ns").fetchnumpy()
    scenarios = {AS_MEASURED: graph}
    for scenario in np.unique(scaled["scenario"]).tolist():
        rows = scaled["scenario"] == scenario
        scenarios[scenario] = apply_scenario(
            graph, node_indices(node_id, scaled["node_id"][rows]),
            duration=scaled["work_ns"][rows], delay=scaled["delay_ns"][rows])
    tables = []
    for scenario, weighed in scenarios.items():
        start, end = replay(weighed)
        per_node = session.from_arrow(pa.table({
            "node_id": node_id, "replayed_start_ns": start, "replayed_end_ns": end,
            "start_delay_ns": graph.delay, "is_inconsistent": graph.is_inconsistent,
            "is_unlaunched": is_unlaunched,
        }))
        spans = (facts.join(per_node, "node_id")
                 .aggregate(SPANS, "run_id, rank, iteration")
                 .filter("gpu_op_count > 0")
                 .arrow())
        if hasattr(spans, "read_all"):  # a RecordBatchReader on newer DuckDB
            spans = spans.read_all()
        tables.append(spans.add_column(
            0, "scenario", pa.array([scenario] * spans.num_rows, pa.string())))
    return pa.concat_tables(tables)
