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
not a maximum per node). The per-rank grouping is done once: DuckDB
numbers each node's run x rank x iteration (the node list is a view, so
every read of it pays for the clock offsets' join), and each scenario's
span is a NumPy min/max per group over the GPU ops sorted by group
(`reduceat`), not a join of every node with its replayed times and an
aggregation per scenario, which cost three times the replay itself
(benchmarks/README.md, "whatif.py"). A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import graph_from_relations, node_indices, replay
from tracehouse.core.replay_scenarios import apply_scenario

#: The plain replay, with every node's measured work.
AS_MEASURED = "as_measured"

#: Every node of a rank (collective instances have none) with its group:
#: one per run x rank x iteration, numbered 0.. in that order.
GROUPED_NODES = """
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind like 'gpu_%' as is_gpu,
        start_ns,
        end_ns,
        dense_rank() over (order by run_id, rank, iteration) - 1 as group_index
    from nodes
    where rank is not null
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
    facts = nodes.query("nodes", GROUPED_NODES).to_arrow_table()
    groups = RankGroups.of(facts, node_id)
    spans = groups.keys.append_column(
        "gpu_op_count", pa.array(groups.gpu_op_count, pa.int64())
    ).append_column("measured_span_ns", pa.array(groups.span(
        np.asarray(facts["start_ns"], dtype=np.int64)[groups.gpu_rows],
        np.asarray(facts["end_ns"], dtype=np.int64)[groups.gpu_rows]), pa.int64()))
    fixed = {
        "start_delay_ns": groups.gpu_sum(graph.delay),
        "unlaunched_op_count": groups.gpu_sum(is_unlaunched),
        "inconsistent_node_count": groups.node_count(graph.is_inconsistent),
    }
    # NULL (keep the replay's weight) as -1: apply_scenario's "keep".
    scaled = dbt.ref("int_whatif_work_scaled").select(
        "scenario, node_id, coalesce(work_ns, -1) as work_ns, "
        "coalesce(delay_ns, -1) as delay_ns").to_arrow_table()
    # The scenario names as codes: comparing or sorting half a million
    # Python strings per scenario cost more than the scenario's replay.
    codes = scaled["scenario"].combine_chunks().dictionary_encode()
    code = codes.indices.to_numpy()
    scaled_node_id, work, delay = (np.asarray(scaled[name], dtype=np.int64)
                                   for name in ("node_id", "work_ns", "delay_ns"))
    scenarios = {AS_MEASURED: graph}
    for number, scenario in sorted(enumerate(codes.dictionary.to_pylist()),
                                   key=lambda pair: pair[1]):
        rows = np.flatnonzero(code == number)
        scenarios[scenario] = apply_scenario(
            graph, node_indices(node_id, scaled_node_id[rows]),
            duration=work[rows], delay=delay[rows])
    tables = []
    for scenario, weighed in scenarios.items():
        start, end = replay(weighed)
        table = spans.append_column("replayed_span_ns", pa.array(groups.span(
            start[groups.gpu_nodes], end[groups.gpu_nodes]), pa.int64()))
        for name, values in fixed.items():
            table = table.append_column(name, pa.array(values, pa.int64()))
        tables.append(table.add_column(
            0, "scenario", pa.array([scenario] * table.num_rows, pa.string())))
    return pa.concat_tables(tables)


class RankGroups:
    """The run x rank x iteration groups that have a GPU op, as sorted index arrays.

    ``gpu_rows`` (rows of the facts table) and ``gpu_nodes`` (the same ops'
    graph indices) list every GPU op sorted by group; ``bounds`` is where
    each group's run of them begins, so a per-group minimum or sum is one
    ``reduceat``. ``keys`` holds each group's run_id, rank and iteration
    (their types as the node list has them); a group with no GPU op is left
    out, as the spans' ``gpu_op_count > 0`` always did.
    """

    def __init__(self, keys, gpu_rows, gpu_nodes, bounds, gpu_groups, all_groups, all_nodes):
        self.keys = keys
        self.gpu_rows = gpu_rows
        self.gpu_nodes = gpu_nodes
        self.bounds = bounds
        self.gpu_op_count = np.diff(np.append(bounds, gpu_rows.size))
        self._gpu_groups = gpu_groups
        self._all_groups = all_groups
        self._all_nodes = all_nodes

    @classmethod
    def of(cls, facts: pa.Table, node_id: np.ndarray) -> RankGroups:
        """The groups of ``facts`` (GROUPED_NODES' rows); ``node_id`` maps them to the graph."""
        group = np.asarray(facts["group_index"], dtype=np.int64)
        nodes = node_indices(node_id, np.asarray(facts["node_id"], dtype=np.int64))
        gpu = np.flatnonzero(np.asarray(facts["is_gpu"], dtype=bool))
        gpu_rows = gpu[np.argsort(group[gpu], kind="stable")]
        bounds = np.flatnonzero(np.diff(group[gpu_rows], prepend=-1) != 0)
        keys = facts.select(["run_id", "rank", "iteration"]).take(pa.array(gpu_rows[bounds]))
        return cls(keys, gpu_rows, nodes[gpu_rows], bounds, group[gpu_rows[bounds]],
                   group, nodes)

    def span(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per group: last end - first start of its GPU ops (arrays in gpu_rows order)."""
        return (np.maximum.reduceat(end, self.bounds)
                - np.minimum.reduceat(start, self.bounds))

    def gpu_sum(self, per_node: np.ndarray) -> np.ndarray:
        """Per group: the sum over its GPU ops of a per-node (graph index) array."""
        return np.add.reduceat(per_node[self.gpu_nodes].astype(np.int64), self.bounds)

    def node_count(self, per_node: np.ndarray) -> np.ndarray:
        """Per group: how many of its nodes (any kind) a per-node boolean flags."""
        flagged = self._all_groups[per_node[self._all_nodes]]
        counts = np.bincount(flagged, minlength=int(self._all_groups.max(initial=-1)) + 1)
        return counts[self._gpu_groups]
