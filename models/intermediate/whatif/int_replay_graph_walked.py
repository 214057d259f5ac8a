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
the work here is a few CPU seconds at 256 ranks, and the two models each
loaded, weighed and replayed the same graph (benchmarks/README.md,
whatif.py). dbt-duckdb's Python model returns one relation, so the two
grains share one long table and the views split it. Why Python at all:
the walk is a longest path, which a recursive CTE does badly (DuckDB's
recursion keeps rows per path, not a maximum per node), and the critical
path follows one pointer per step.

How it stays cheap (issue 30): DuckDB numbers the nodes once, in the order
it reads them (a trace's nodes lie together, so an edge's two ends are
close in memory), in a temporary table that every later read joins on
node_id: the edges, the scenarios' rows and the part and group of each
node arrive as positions, with no search of 2 M hashed ids per read. The
graph is ordered once (tracehouse.core.replay.ReplayPlan) and each
scenario is one pass over that order, the `as_measured` one writing each
vertex's binding predecessor for the critical path as it goes. Scenarios
are replayed one at a time, so only one set of weights is held. Each
scenario's span is a NumPy min/max per group over the GPU ops sorted by
group (`reduceat`). A table rebuilt each time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.core.replay import planned_without_cycles, walk_back, weigh
from tracehouse.core.replay_scenarios import apply_scenario

#: The plain replay, with every node's measured work.
AS_MEASURED = "as_measured"

#: The temporary table of numbered nodes (this model's session only).
NUMBERED = "replay_nodes_numbered"

#: The nodes whose span is a rank's replayed step: GPU ops, or on a trace
#: without any, the thread's compute pieces and c10d calls
#: (int_replay_host_ops_listed).
WORK_KINDS = "(node_kind like 'gpu_%' or node_kind like 'host_%')"

#: The temporary tables of this model's session: the runs x iterations
#: (PARTS: part, numbered 0.. in that order: the graph's independent parts),
#: the runs x ranks x iterations (GROUPS: group_index, 0.. in that order)
#: and every node, numbered 0.. (node_index) in the order DuckDB reads
#: them, with its part and group (NUMBERED; a collective instance has no
#: rank, so no group). Numbers come from the distinct keys joined back, not
#: from windows over every node (a sort of 2 M rows each); the node table
#: carries only what the arrays need, the keys stay in the small ones.
PARTS, GROUPS = "replay_parts_numbered", "replay_groups_numbered"
NUMBER_NODES = [
    f"""
    create or replace temp table {PARTS} as
    select
        run_id,
        iteration,
        row_number() over (order by run_id, iteration) - 1 as part
    from (select distinct run_id, iteration from nodes)
    """,
    f"""
    create or replace temp table {GROUPS} as
    select
        run_id,
        rank,
        iteration,
        row_number() over (order by run_id, rank, iteration) - 1 as group_index
    from (select distinct run_id, rank, iteration from nodes where rank is not null)
    """,
    f"""
    create or replace temp table {NUMBERED} as
    with placed as (
        select
            nodes.node_id,
            nodes.start_ns,
            nodes.end_ns,
            nodes.node_kind = 'iteration_start' as is_root,
            nodes.node_kind like 'gpu_%' as is_gpu,
            {WORK_KINDS.replace("node_kind", "nodes.node_kind")} as is_work,
            nodes.node_kind like '%_communication' as is_comm,
            nodes.node_kind = 'collective' as is_instance,
            parts.part::int as part,
            coalesce(groups.group_index, -1)::int as group_index
        from nodes
        inner join {PARTS} as parts
            on nodes.run_id = parts.run_id and nodes.iteration is not distinct from parts.iteration
        left join {GROUPS} as groups
            on
                nodes.run_id = groups.run_id
                and nodes.rank = groups.rank
                and nodes.iteration is not distinct from groups.iteration
    )
    select
        (row_number() over () - 1)::int as node_index,
        *
    from placed
    """,
]

#: Every edge by its nodes' node_index and points (1: the node's end).
EDGE_VERTICES = f"""
    select
        src.node_index as src,
        (edges.src_point = 'end')::tinyint as src_point,
        dst.node_index as dst,
        (edges.dst_point = 'end')::tinyint as dst_point
    from edges
    inner join {NUMBERED} as src on edges.src_node_id = src.node_id
    inner join {NUMBERED} as dst on edges.dst_node_id = dst.node_id
"""


def scenario_rows(scenario: str) -> str:
    """SQL of one scenario's rows (int_whatif_work_scaled) by node_index;
    NULL (keep the replay's weight) as -1, apply_scenario's "keep". One
    query per scenario, so only one scenario's rows are held at a time
    (no_host_gaps alone is every runtime call and GPU op: half the 4 M rows
    at 256 ranks x 2 iterations)."""
    return f"""
    select
        numbered.node_index,
        coalesce(scaled.work_ns, -1) as work_ns,
        coalesce(scaled.delay_ns, -1) as delay_ns
    from scaled
    inner join {NUMBERED} as numbered on scaled.node_id = numbered.node_id
    where scaled.scenario = '{scenario.replace("'", "''")}'
"""


#: Rows per scenario (int_whatif_work_scaled), in name order.
SCENARIO_COUNTS = "select scenario, count(*) from scaled group by scenario order by scenario"


def model(dbt, session):
    """dbt-duckdb entry point: weigh the graph, replay each scenario (spans per
    rank), walk the measured replay's critical path; one long table."""
    dbt.config(materialized="table")
    nodes = dbt.ref("int_replay_nodes_listed")
    try:
        for statement in NUMBER_NODES:
            nodes.query("nodes", statement)
        table = _walked(session, dbt.ref("int_replay_edges_typed"),
                        dbt.ref("int_whatif_work_scaled"))
    finally:
        for temporary in (NUMBERED, GROUPS, PARTS):
            session.execute(f"drop table if exists {temporary}")
    # (One return at the function's top level: dbt's parser asks for it.)
    return table


def _walked(session, edges, scaled) -> pa.Table:
    """The model's table from the numbered nodes, the edges and the scenarios' rows.

    What the scenarios do not need is let go before they run (the nodes'
    arrays, the measured replay's times and binding predecessors), and they
    are replayed one at a time: at 256 ranks x 2 iterations this kept the
    model's peak ~250 MB lower, and a default build's peak is this model's
    (benchmarks/README.md, issue 30)."""
    nodes = ReplayNodes.of(session)
    graph = nodes.graph(edges)
    graph, plan, cut = without_cycles(session, nodes, graph)
    skipped = np.isin(nodes.part, cut)
    # Only step_start edges leave a root: into a rank's first runtime call
    # and into every GPU op whose launch the trace lacks.
    # (On a trace without GPU ops the root's edge into its first compute
    # piece or c10d call is the thread's start, not a missing launch.)
    is_unlaunched = np.zeros(graph.size, dtype=bool)
    is_unlaunched[graph.dst[graph.is_root[graph.src]]] = True
    is_unlaunched &= nodes.is_gpu
    groups = RankGroups.of(session, nodes, kept=~skipped)
    spans = groups.keys.append_column(
        "gpu_op_count", pa.array(groups.gpu_op_count, pa.int64())
    ).append_column("measured_span_ns", pa.array(groups.span(
        nodes.start_ns[groups.gpu_nodes], nodes.end_ns[groups.gpu_nodes]), pa.int64()))
    fixed = {
        "start_delay_ns": groups.gpu_sum(graph.delay),
        "unlaunched_op_count": groups.gpu_sum(is_unlaunched),
        "inconsistent_node_count": groups.node_count(graph.is_inconsistent),
        "rank_local_comm_count": groups.gpu_sum(
            rank_local_comm(graph, nodes.is_comm, nodes.is_instance)),
    }
    # As measured first: its binding predecessors give the critical path,
    # then they and its replayed times are let go before the scenarios.
    start, end, predecessor = plan.replay(graph, key=nodes.id_rank)
    path = critical_paths(session, nodes, start, end, predecessor, skipped)
    del nodes, predecessor
    tables = [_scenario_spans(spans, AS_MEASURED, groups, start, end, fixed)]
    del start, end
    for name, count in scaled.query("scaled", SCENARIO_COUNTS).fetchall():
        rows = _fetched(scaled.query("scaled", scenario_rows(name)),
                        count, "int_whatif_work_scaled")
        weighed = apply_scenario(graph, rows["node_index"], duration=rows["work_ns"],
                                 delay=rows["delay_ns"])
        del rows
        start, end, _ = plan.replay(weighed)
        del weighed
        tables.append(_scenario_spans(spans, name, groups, start, end, fixed))
        del start, end
    spans = pa.concat_tables(tables)
    return pa.concat_tables(
        [_with_kind(spans, "span"), _with_kind(path, "path")], promote_options="permissive")


def _scenario_spans(spans: pa.Table, name: str, groups: RankGroups, start: np.ndarray,
                    end: np.ndarray, fixed: dict[str, np.ndarray]) -> pa.Table:
    """``spans`` (the groups' keys and measured figures) with one replay's
    spans, the scenario-independent counts and a leading ``scenario`` column."""
    table = spans.append_column("replayed_span_ns", pa.array(groups.span(
        start[groups.gpu_nodes], end[groups.gpu_nodes]), pa.int64()))
    for column, values in fixed.items():
        table = table.append_column(column, pa.array(values, pa.int64()))
    return table.add_column(0, "scenario", pa.array([name] * table.num_rows, pa.string()))


def _count(relation) -> int:
    """Rows of a relation."""
    return int(relation.aggregate("count(*)").fetchall()[0][0])


def _fetched(relation, count: int, source: str) -> dict[str, np.ndarray]:
    """Every column of ``relation`` (``count`` rows: one per row of
    ``source``, which it joins to the numbered nodes) as a NumPy array,
    streamed batch by batch into arrays of that size: DuckDB never holds the
    whole result beside them (4 M scenario rows, 3.8 M edges at 256 ranks x
    2 iterations). Raises ValueError when rows are missing: ``source``
    names a node that int_replay_nodes_listed does not list."""
    reader = relation.to_arrow_reader(1 << 20)
    columns = {field.name: np.empty(count, dtype=field.type.to_pandas_dtype())
               for field in reader.schema}
    filled = 0
    with reader:  # closed even on an error, so the session can run the next query
        for batch in reader:
            rows = min(batch.num_rows, count - filled)
            for name, column in zip(batch.schema.names, batch.columns):
                columns[name][filled:filled + rows] = column.to_numpy(
                    zero_copy_only=False)[:rows]
            filled += batch.num_rows
    if filled != count:
        raise ValueError(f"{source}: {count} rows, {filled} joined to the nodes that "
                         "int_replay_nodes_listed lists: it names nodes that are not listed")
    return columns


class ReplayNodes:
    """The numbered nodes (NUMBER_NODES' temporary table) as arrays, by node_index.

    ``id_rank`` is each node's position among the ids in ascending order:
    the order in which ties between binding sources go (replay.
    binding_predecessors; it was the node's index when nodes were numbered
    by id), so the critical path does not depend on DuckDB's read order.
    """

    def __init__(self, columns: dict[str, np.ndarray], part_keys: pa.Table):
        self.node_id = columns["node_id"]
        self.start_ns = columns["start_ns"]
        self.end_ns = columns["end_ns"]
        self.is_root = columns["is_root"]
        self.is_gpu = columns["is_gpu"]
        self.is_work = columns["is_work"]
        self.is_comm = columns["is_comm"]
        self.is_instance = columns["is_instance"]
        self.part = columns["part"]
        self.group_index = columns["group_index"]
        self.part_keys = part_keys
        by_id = np.argsort(self.node_id, kind="stable")
        ascending = self.node_id[by_id]
        if (repeated := ascending[1:] == ascending[:-1]).any():
            raise ValueError(f"replay node ids collide: {ascending[1:][repeated][:5].tolist()} "
                             "are each listed twice (int_replay_nodes_listed.node_id)")
        self.id_rank = np.empty(self.node_id.shape[0], dtype=np.int64)
        self.id_rank[by_id] = np.arange(self.node_id.shape[0], dtype=np.int64)

    @property
    def size(self) -> int:
        """Number of nodes."""
        return int(self.node_id.shape[0])

    @classmethod
    def of(cls, session) -> ReplayNodes:
        """Read NUMBERED: every column placed at its node_index (group_index
        -1 for a collective instance), and each part's run_id and iteration."""
        numbered = session.table(NUMBERED)
        fetched = _fetched(numbered, _count(numbered), "int_replay_nodes_listed")
        position = fetched.pop("node_index")
        columns = {}
        for name, values in fetched.items():
            columns[name] = np.empty_like(values)
            columns[name][position] = values
        part_keys = session.sql(
            f"select part, run_id, iteration from {PARTS} order by part").to_arrow_table()
        return cls(columns, part_keys)

    def graph(self, edges):
        """The weighed replay graph (tracehouse.core.replay.weigh) of these
        nodes and ``edges`` (int_replay_edges_typed), by node_index. Raises
        ValueError when an edge names a node that is not listed."""
        linked = _fetched(edges.query("edges", EDGE_VERTICES), _count(edges),
                          "int_replay_edges_typed")
        return weigh(start=self.start_ns, end=self.end_ns, is_root=self.is_root, **linked)


def without_cycles(session, nodes: ReplayNodes, graph):
    """(graph, its ReplayPlan, cut parts): ``graph`` with every run x
    iteration whose replay graph has a cycle, or a node with no dependency
    that is no root, cut loose (tracehouse.core.replay.
    drop_cyclic_parts), each named in a dbt warning with a few of its nodes.
    Why not fail: one odd run (collectives matched in orders that cross)
    would take every run's what-if and findings down; its spans and
    critical path are left out, the warning says so."""
    graph, plan, cut, why = planned_without_cycles(graph, nodes.part)
    for label, left in cut.items():
        # part_keys holds parts 0.. in order, one row each.
        _warn(f"int_replay_graph_walked: run {nodes.part_keys['run_id'][label].as_py()!r} "
              f"iteration {nodes.part_keys['iteration'][label].as_py()}: the replay graph "
              f"{why[label]} "
              f"({left.size} nodes at fault; first node_ids "
              f"{np.sort(nodes.node_id[left])[:5].tolist()}, int_replay_nodes_listed); "
              "that run x iteration is left out of the replay (fct_step_replay, "
              "fct_critical_path, fct_what_if), every other one is replayed")
    return graph, plan, np.asarray(sorted(cut), dtype=np.int64)


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


def critical_paths(session, nodes: ReplayNodes, start: np.ndarray, end: np.ndarray,
                   predecessor: np.ndarray, skipped: np.ndarray) -> pa.Table:
    """Every run x iteration's critical path in the replay ``start``/``end``,
    along ``predecessor`` (each vertex's binding source, replay.
    binding_predecessors' rule): walked back from the work node (GPU op, or
    a CPU-only trace's piece or c10d call) ending last (ties: the highest
    node id), one row per vertex (run_id, iteration, path_step, node_id,
    point, segment, segment_ns). Run x iterations whose nodes ``skipped``
    flags (cut for a cycle) have none."""
    value = np.empty(2 * nodes.size, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    work = np.flatnonzero(nodes.is_work)
    part_count = nodes.part_keys.num_rows
    last_end = np.full(part_count, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_end, nodes.part[work], end[work])
    ending_last = work[end[work] == last_end[nodes.part[work]]]
    sink_id = np.full(part_count, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(sink_id, nodes.part[ending_last], nodes.node_id[ending_last])
    sink_of = {int(nodes.part[index]): int(index) for index in ending_last
               if nodes.node_id[index] == sink_id[nodes.part[index]]}
    run_ids = nodes.part_keys["run_id"].to_pylist()
    iterations = nodes.part_keys["iteration"].to_pylist()
    columns: dict[str, list] = {name: [] for name in (
        "run_id", "iteration", "path_step", "node_id", "point", "segment", "segment_ns")}
    for part in sorted(sink_of):
        sink = sink_of[part]
        if skipped[sink]:
            continue
        path = walk_back(predecessor, 2 * sink + 1)
        previous = np.concatenate([[path[0]], path[:-1]])
        is_end = path % 2 == 1
        own_start = previous == path - 1
        segment = np.where(~is_end, "delay", np.where(own_start, "work", "wait"))
        segment[0] = "start"
        count = path.shape[0]
        columns["run_id"] += [run_ids[part]] * count
        columns["iteration"] += [int(iterations[part])] * count
        columns["path_step"] += list(range(count))
        columns["node_id"] += nodes.node_id[path // 2].tolist()
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
    """The run x rank x iteration groups that have a work node (GPU op, or a
    CPU-only trace's piece or c10d call), as sorted index arrays.

    ``gpu_nodes`` lists every such node (by node_index) sorted by group;
    ``bounds`` is where each group's run of them begins, so a per-group
    minimum or sum is one ``reduceat``. ``keys`` holds each group's run_id,
    rank and iteration (their types as the node list has them); a group
    with no work node is left out, as the spans' ``gpu_op_count > 0``
    always did.
    """

    def __init__(self, keys, gpu_nodes, bounds, gpu_groups, all_groups, all_nodes):
        self.keys = keys
        self.gpu_nodes = gpu_nodes
        self.bounds = bounds
        self.gpu_op_count = np.diff(np.append(bounds, gpu_nodes.size))
        self._gpu_groups = gpu_groups
        self._all_groups = all_groups
        self._all_nodes = all_nodes

    @classmethod
    def of(cls, session, nodes: ReplayNodes, kept: np.ndarray) -> RankGroups:
        """The groups of ``nodes``' rank nodes where ``kept`` (not cut for a cycle)."""
        all_nodes = np.flatnonzero(kept & (nodes.group_index >= 0))
        group = nodes.group_index[all_nodes]
        work = all_nodes[nodes.is_work[all_nodes]]
        gpu_nodes = work[np.argsort(nodes.group_index[work], kind="stable")]
        bounds = np.flatnonzero(np.diff(nodes.group_index[gpu_nodes], prepend=-1) != 0)
        gpu_groups = nodes.group_index[gpu_nodes[bounds]]
        keys = session.sql(
            f"select run_id, rank, iteration from {GROUPS} order by group_index"
        ).to_arrow_table()
        keys = keys.take(pa.array(gpu_groups))
        return cls(keys, gpu_nodes, bounds, gpu_groups, group, all_nodes)

    def span(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per group: last end - first start of its work nodes (arrays in gpu_nodes order)."""
        return (np.maximum.reduceat(end, self.bounds)
                - np.minimum.reduceat(start, self.bounds))

    def gpu_sum(self, per_node: np.ndarray) -> np.ndarray:
        """Per group: the sum over its work nodes of a per-node array."""
        return np.add.reduceat(per_node[self.gpu_nodes].astype(np.int64), self.bounds)

    def node_count(self, per_node: np.ndarray) -> np.ndarray:
        """Per group: how many of its nodes (any kind) a per-node boolean flags."""
        flagged = self._all_groups[per_node[self._all_nodes]]
        counts = np.bincount(flagged, minlength=int(self._all_groups.max(initial=-1)) + 1)
        return counts[self._gpu_groups]
