"""The what-if replay, weighed once: one row per replayed span or critical-path vertex.

Two kinds of row (``row_kind``), each read by a SQL view of its own:

* ``span`` (int_replay_steps_replayed): one per scenario x run x rank x
  iteration with GPU work, the replayed GPU span. The graph
  (int_replay_nodes_listed, int_replay_edges_typed) is weighed once
  (tracehouse.core.replay.weigh: delays, work and own times from the
  measured times) and replayed once per scenario: `as_measured` with the
  measured work (fct_step_replay checks it against the measured step),
  then each scenario of int_whatif_work_scaled with its nodes' durations
  and delays replaced (fct_what_if; tracehouse.core.replay_scenarios.
  apply_scenario gives each to the right weight). Each rank's GPU span in
  each iteration (first GPU start to last GPU end; on a trace without GPU
  ops, its thread's compute pieces and c10d calls,
  int_replay_host_ops_listed, stand in for them: `gpu_op_count` counts
  those) is kept, with what the
  replay does not explain, counted (scenario-independent: the graph's
  weights): the GPU ops' start delays, GPU ops without a launch (anchored
  at the iteration start), nodes whose measured times broke an edge,
  communication ops that no collective instance ties to another rank.
* ``path`` (int_critical_path_walked): one per vertex on each run x
  iteration's critical path, HTA's critical_path_analysis over the whole
  replay graph: from the GPU op that ends last in the iteration (any rank)
  back along the edges that set each replayed time
  (tracehouse.core.replay.binding_predecessors) to a rank's iteration
  start, in the `as_measured` replay. Each vertex is a node's start or
  end; segment_ns is the time from the previous vertex on the path: at a
  start, the node's delay after its binding dependency (`delay`); at an
  end, its own work (`work`) or, where something else ended it (a
  collective's last arrival, the GPU op a host sync waited for), its own
  transfer or return after that (`wait`). The segments add up to the
  path's length.

A run x iteration whose graph has a cycle (edges that cannot all hold:
collectives matched across ranks in orders that cross, which
int_replay_members_paired refuses where it can tell) is cut loose
(tracehouse.core.replay.drop_cyclic_parts) and named in a dbt warning with
a few of its nodes; it has no span and no path rows, every other run x
iteration is replayed (one odd run must not take every run's what-if and
findings down).

Why one model for both: dbt-duckdb charges each Python model 1.2-2.9 s
of its own (compiling, importing, creating and renaming the table) where
the work here is 0.3-0.7 CPU s at 256 ranks, and the two models each
loaded, weighed and replayed the same graph (benchmarks/README.md,
whatif.py). dbt-duckdb's Python model returns one relation, so the two
grains share one long table and the views split it. Why Python at all:
the walk is a longest path, which a recursive CTE does badly (DuckDB's
recursion keeps rows per path, not a maximum per node), and the critical
path follows one pointer per step. The per-rank grouping is done once:
DuckDB numbers each node's run x rank x iteration, and each scenario's
span is a NumPy min/max per group over the GPU ops sorted by group
(`reduceat`). A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import (
    binding_predecessors,
    drop_cyclic_parts,
    graph_from_relations,
    node_indices,
    replay,
    walk_back,
)
from tracehouse.core.replay_scenarios import apply_scenario

#: The plain replay, with every node's measured work.
AS_MEASURED = "as_measured"

#: The nodes whose span is a rank's replayed step: GPU ops, or on a trace
#: without any, the thread's compute pieces and c10d calls
#: (int_replay_host_ops_listed).
WORK_KINDS = "(node_kind like 'gpu_%' or node_kind like 'host_%')"

#: Every node of a rank (collective instances have none) with its group:
#: one per run x rank x iteration, numbered 0.. in that order.
GROUPED_NODES = f"""
    select
        node_id,
        run_id,
        rank,
        iteration,
        {WORK_KINDS} as is_gpu,
        start_ns,
        end_ns,
        dense_rank() over (order by run_id, rank, iteration) - 1 as group_index
    from nodes
    where rank is not null
"""

#: Every node's run x iteration, numbered 0..: the graph's independent parts.
NODE_PARTS = """
    select
        node_id,
        run_id,
        iteration,
        dense_rank() over (order by run_id, iteration) - 1 as part
    from nodes
"""


def model(dbt, session):
    """dbt-duckdb entry point: weigh the graph, replay each scenario (spans per
    rank), walk the measured replay's critical path; one long table."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_listed")
    node_id, graph = graph_from_relations(nodes, dbt.ref("int_replay_edges_typed"))
    graph, part, cut = without_cycles(nodes, node_id, graph)
    # Only step_start edges leave a root: into a rank's first runtime call
    # and into every GPU op whose launch the trace lacks.
    # (On a trace without GPU ops the root's edge into its first compute
    # piece or c10d call is the thread's start, not a missing launch.)
    flags = node_flags(nodes, node_id, graph.size, is_gpu="node_kind like 'gpu_%'",
                       is_comm="node_kind like '%_communication'",
                       is_instance="node_kind = 'collective'")
    is_unlaunched = np.zeros(graph.size, dtype=bool)
    is_unlaunched[graph.dst[graph.is_root[graph.src]]] = True
    is_unlaunched &= flags["is_gpu"]
    facts = nodes.query("nodes", GROUPED_NODES).to_arrow_table()
    facts = facts.filter(pa.array(~np.isin(
        part[node_indices(node_id, np.asarray(facts["node_id"], dtype=np.int64))], cut)))
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
        "rank_local_comm_count": groups.gpu_sum(
            rank_local_comm(graph, flags["is_comm"], flags["is_instance"])),
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
        if scenario == AS_MEASURED:
            path = critical_paths(session, nodes, node_id, graph, start, end,
                                  skipped=np.isin(part, cut))
        table = spans.append_column("replayed_span_ns", pa.array(groups.span(
            start[groups.gpu_nodes], end[groups.gpu_nodes]), pa.int64()))
        for name, values in fixed.items():
            table = table.append_column(name, pa.array(values, pa.int64()))
        tables.append(table.add_column(
            0, "scenario", pa.array([scenario] * table.num_rows, pa.string())))
    spans = pa.concat_tables(tables)
    return pa.concat_tables(
        [_with_kind(spans, "span"), _with_kind(path, "path")], promote_options="permissive")


def without_cycles(nodes, node_id: np.ndarray, graph):
    """(graph, part per node, cut parts): ``graph`` with every run x iteration
    whose replay graph has a cycle, or a node with no dependency that is no
    root, cut loose (tracehouse.core.replay.
    drop_cyclic_parts), each named in a dbt warning with a few of its nodes.
    Why not fail: one odd run (collectives matched in orders that cross)
    would take every run's what-if and findings down; its spans and
    critical path are left out, the warning says so."""
    parts = nodes.query("nodes", NODE_PARTS).to_arrow_table()
    part = np.empty(graph.size, dtype=np.int64)
    part[node_indices(node_id, np.asarray(parts["node_id"], dtype=np.int64))] = np.asarray(
        parts["part"], dtype=np.int64)
    graph, cut, why = drop_cyclic_parts(graph, part)
    labels = np.asarray(parts["part"], dtype=np.int64)
    for label, left in cut.items():
        row = int(np.flatnonzero(labels == label)[0])
        _warn(f"int_replay_graph_walked: run {parts['run_id'][row].as_py()!r} iteration "
              f"{parts['iteration'][row].as_py()}: the replay graph {why[label]} "
              f"({left.size} nodes at fault; first node_ids "
              f"{node_id[left[:5]].tolist()}, int_replay_nodes_listed); that run x "
              "iteration is left out of the replay (fct_step_replay, fct_critical_path, "
              "fct_what_if), every other one is replayed")
    return graph, part, np.asarray(sorted(cut), dtype=np.int64)


def node_flags(nodes, node_id: np.ndarray, size: int, **conditions: str) -> dict:
    """Per graph index, one boolean array per SQL condition on the node list
    (``name=condition``), e.g. the GPU ops or the collective instances."""
    columns = nodes.select(", ".join(
        ["node_id"] + [f"({sql}) as {name}" for name, sql in conditions.items()])).fetchnumpy()
    index = node_indices(node_id, np.asarray(columns["node_id"], dtype=np.int64))
    flags = {}
    for name in conditions:
        flags[name] = np.zeros(size, dtype=bool)
        flags[name][index] = np.asarray(columns[name], dtype=bool)
    return flags


def rank_local_comm(graph, is_comm: np.ndarray, is_instance: np.ndarray) -> np.ndarray:
    """Per node: a communication op that no collective instance with another
    member ties to other ranks (int_replay_members_paired left it out, found
    it alone, or its group has one rank), so the replay keeps its measured
    time, waits included, as its own. Read from the graph's edges, the one
    place that says what the replay tied: a member's start -> its instance
    (every member has one; the instance -> its end, only a member that
    waited)."""
    members = np.bincount(graph.dst[is_instance[graph.dst]], minlength=graph.size)
    tied = np.zeros(graph.size, dtype=bool)
    tied[graph.src[is_instance[graph.dst] & (members[graph.dst] > 1)]] = True
    return is_comm & ~tied


def _warn(message: str) -> None:
    """A dbt warning (as Jinja's ``exceptions.warn``), shown in the run's log
    and summary; ``--warn-error`` makes it an error, as for any warning."""
    from dbt.events.types import JinjaLogWarning
    from dbt_common.events.functions import warn_or_error

    warn_or_error(JinjaLogWarning(msg=message))


def _with_kind(table: pa.Table, kind: str) -> pa.Table:
    """``table`` with a leading ``row_kind`` column of ``kind``."""
    return table.add_column(0, "row_kind", pa.array([kind] * table.num_rows, pa.string()))


def critical_paths(session, nodes, node_id: np.ndarray, graph, start: np.ndarray,
                   end: np.ndarray, skipped: np.ndarray) -> pa.Table:
    """Every run x iteration's critical path in the replay ``start``/``end`` of
    ``graph``: walked back from the GPU op ending last (ties: the highest node
    id), one row per vertex (run_id, iteration, path_step, node_id, point,
    segment, segment_ns). Run x iterations whose nodes ``skipped`` flags
    (cut for a cycle) have none."""
    predecessor = binding_predecessors(graph, start, end)
    value = np.empty(2 * graph.size, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    ends = session.from_arrow(pa.table({"node_id": node_id, "replayed_end_ns": end}))
    sinks = (nodes.filter(WORK_KINDS).select("node_id, run_id, iteration")
             .join(ends, "node_id")
             .aggregate("run_id, iteration, "
                        "arg_max(node_id, (replayed_end_ns, node_id)) as sink_node_id",
                        "run_id, iteration")
             .order("run_id, iteration").fetchall())
    columns: dict[str, list] = {name: [] for name in (
        "run_id", "iteration", "path_step", "node_id", "point", "segment", "segment_ns")}
    for run_id, iteration, sink_node_id in sinks:
        sink = int(node_indices(node_id, [sink_node_id])[0])
        if skipped[sink]:
            continue
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
