"""Replay a dependency graph: every op's start and end from weights and edges alone.

Why a routine of its own: the what-if models (issue 33) replay the graph
that ``int_replay_edges_typed`` lists, once as measured and again under
each scenario's scaled durations; tests lengthen one kernel and check what
moves. The walk is a longest path, which SQL does poorly (a recursive CTE
must carry every path, not the maximum per node), so it is NumPy: a
frontier sweep in topological order (Kahn), vectorised over every node
whose dependencies are all resolved, so its Python loop runs once per level
of the graph (about twice a rank's runtime calls per iteration), not once
per node.

The model (one per node ``i``, all times integer ns):

* start(i) = max over start dependencies (source's start or end) + delay(i);
* end(i)   = max(start(i) + work(i), max over end dependencies) + own(i);
* a root (a rank's iteration start) has start = end = its anchor.

Nothing measured about a dependent op enters: only its delay, work and own
time, which are durations. They are taken from the measured times once,
before any replay (``weigh``), here rather than in a SQL model: a NumPy
scatter-max over the edges costs a fraction of a second where the join of
every edge with its source node, materialised as a table, cost seconds at
256 ranks (benchmarks/README.md, whatif.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

try:
    from ._replay_walk import evaluate as _evaluate
    from ._replay_walk import plan as _plan
except ImportError:  # built without a C compiler: the numpy frontier sweep
    _evaluate = _plan = None

START, END = 0, 1


class UnreplayableGraphError(ValueError):
    """The replay graph cannot be walked: ``nodes`` holds the indices of the
    nodes at fault, ascending, so that a caller can drop the part of the
    graph they belong to (``drop_cyclic_parts``) rather than lose the whole
    replay; ``what`` says what is wrong, for a warning."""

    what = "cannot be replayed"

    def __init__(self, message: str, nodes: np.ndarray):
        super().__init__(message)
        self.nodes = nodes


class ReplayCycleError(UnreplayableGraphError):
    """The replay graph has a cycle (or vertices only a cycle reaches)."""

    what = "has a cycle"


class ReplayStrayNodeError(UnreplayableGraphError):
    """A node has no dependency and is no root: nothing says when it may
    start (an edge kind the graph's SQL missed for an unusual trace, e.g. an
    Nsight export without NVTX or runtime rows)."""

    what = "has nodes with no dependency that are no root"


@dataclass(frozen=True)
class ReplayGraph:
    """Nodes ``0..n-1`` and their edges, as arrays.

    ``src``/``dst`` index nodes; ``src_point``/``dst_point`` are START or END.
    ``anchor`` holds a root's start and is ignored (any value) elsewhere;
    ``is_root`` says which nodes are roots; ``is_inconsistent`` which nodes'
    measured times broke an edge (a weight clamped to 0 by ``weigh``).
    """

    delay: np.ndarray
    work: np.ndarray
    own: np.ndarray
    anchor: np.ndarray
    is_root: np.ndarray
    src: np.ndarray
    src_point: np.ndarray
    dst: np.ndarray
    dst_point: np.ndarray
    is_inconsistent: np.ndarray

    @property
    def size(self) -> int:
        """Number of nodes."""
        return int(self.delay.shape[0])


def vertex_edges(graph: ReplayGraph, work: np.ndarray | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, target, weight) of every vertex edge: vertex 2i is node i's start,
    2i+1 its end; the graph's edges weigh 0, each node's own start -> end edge
    its work (``work`` replaces the graph's)."""
    work = graph.work if work is None else work
    nodes = np.arange(graph.size, dtype=np.int64)
    src_v = np.concatenate([2 * graph.src.astype(np.int64) + graph.src_point, 2 * nodes])
    dst_v = np.concatenate([2 * graph.dst.astype(np.int64) + graph.dst_point, 2 * nodes + 1])
    weight = np.concatenate([np.zeros(graph.src.shape[0], dtype=np.int64),
                             work.astype(np.int64)])
    return src_v, dst_v, weight


def replay(graph: ReplayGraph, work: np.ndarray | None = None,
           compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Replayed (start, end) of every node, int64 ns.

    ``work`` replaces the graph's work durations (a what-if scenario scales
    them). ``compiled``: walk with the C extension (``_replay_walk.c``: a
    ReplayPlan, ordered and evaluated in one pass each) or the numpy
    frontier sweep (one loop step per level of the graph); ``None``: the
    extension where it is built. Both give the same answer (tests). Raises
    ReplayCycleError (a ValueError) naming the nodes left when the graph has
    a cycle, ReplayStrayNodeError naming the nodes that have no dependency
    and are no root.
    """
    if compiled is None:
        compiled = _plan is not None
    if compiled and _plan is None:
        raise RuntimeError("tracehouse.core._replay_walk is not built (no C compiler at install)")
    if compiled:
        weighed = graph if work is None else dataclasses.replace(graph, work=work)
        start, end, _ = ReplayPlan.of(graph).replay(weighed)
        return start, end
    return _sweep(graph, work)


def _sweep(graph: ReplayGraph, work: np.ndarray | None = None,
           ) -> tuple[np.ndarray, np.ndarray]:
    """replay() by the numpy frontier sweep; also the cycle's report after a
    compiled plan stopped short."""
    vertices = 2 * graph.size
    src_v, dst_v, weight = vertex_edges(graph, work)
    add = np.empty(vertices, dtype=np.int64)
    add[0::2] = graph.delay
    add[1::2] = graph.own
    indegree = np.bincount(dst_v, minlength=vertices)
    value = np.zeros(vertices, dtype=np.int64)
    frontier = np.flatnonzero(indegree == 0)
    _refuse_stray(graph, frontier)
    value[frontier] = graph.anchor[frontier // 2]
    order = np.argsort(src_v, kind="stable")
    src_v, dst_v, weight = src_v[order], dst_v[order], weight[order]
    first = np.searchsorted(src_v, np.arange(vertices + 1, dtype=np.int64))
    best = np.full(vertices, np.iinfo(np.int64).min, dtype=np.int64)
    resolved = 0
    while frontier.size:
        resolved += frontier.size
        lo = first[frontier]
        counts = first[frontier + 1] - lo
        total = int(counts.sum())
        if total == 0:
            break
        # The out-edges of every frontier vertex, as one index array.
        edge = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total)
        targets = dst_v[edge]
        np.maximum.at(best, targets, value[src_v[edge]] + weight[edge])
        touched, hits = np.unique(targets, return_counts=True)
        indegree[touched] -= hits
        frontier = touched[indegree[touched] == 0]
        value[frontier] = best[frontier] + add[frontier]
    if resolved != vertices:
        left = np.flatnonzero(indegree > 0)
        raise ReplayCycleError(
            f"the replay graph has a cycle: {left.size} vertices never resolved "
            f"(first nodes: {(left[:5] // 2).tolist()})", np.unique(left // 2))
    return value[0::2], value[1::2]


def _refuse_stray(graph: ReplayGraph, frontier: np.ndarray) -> None:
    """Raise ReplayStrayNodeError when a vertex of ``frontier`` (those
    without an in-edge) is not a root's start."""
    stray = np.setdiff1d(frontier, 2 * np.flatnonzero(graph.is_root))
    if stray.size:
        raise ReplayStrayNodeError(
            f"{stray.size} replay vertices have no dependency and are no root "
            f"(first nodes: {(stray[:5] // 2).tolist()})", np.unique(stray // 2))


@dataclass(frozen=True)
class ReplayPlan:
    """A graph's vertices in one topological order, with each vertex's
    in-edges laid out in that order (``_replay_walk.plan``).

    Why: the what-if model replays one graph under seven sets of weights
    (as measured and each scenario). The order depends only on the edges,
    so it is found once, and each replay is then one pass over arrays read
    in order (``_replay_walk.evaluate``): where a fresh walk per weighing
    rebuilt its adjacency and chased edges across ~2 M nodes in hash order
    (1.3 CPU s each at 256 ranks x 2 iterations, benchmarks/README.md).
    ``order`` is None where the extension is not built: ``replay`` then
    sweeps with numpy each time.
    """

    order: np.ndarray | None
    ptr: np.ndarray | None
    in_src: np.ndarray | None

    @classmethod
    def of(cls, graph: ReplayGraph) -> ReplayPlan:
        """The plan of ``graph``'s edges. Raises as replay() does: a stray
        node (ReplayStrayNodeError), a cycle (ReplayCycleError)."""
        if max(2 * graph.size + 1, graph.src.shape[0]) > np.iinfo(np.int32).max:
            raise ValueError(f"a replay graph of {graph.size} nodes and {graph.src.shape[0]} "
                             "edges is too large for the plan's int32 arrays")
        src_v = 2 * graph.src.astype(np.int32)
        src_v += graph.src_point
        dst_v = 2 * graph.dst.astype(np.int32)
        dst_v += graph.dst_point
        has_in = np.zeros(2 * graph.size, dtype=bool)
        has_in[dst_v] = True
        has_in[1::2] = True  # an end always waits for its own start
        _refuse_stray(graph, np.flatnonzero(~has_in))
        if _plan is None:
            return cls(None, None, None)
        # int32 (the vertex and edge counts are checked above): the plan is
        # held beside the graph for every replay (~50 MB less at 256 ranks x
        # 2 iterations than int64, ~100 MB less while it is built).
        order = np.empty(2 * graph.size, dtype=np.int32)
        ptr = np.empty(2 * graph.size + 1, dtype=np.int32)
        in_src = np.empty(src_v.shape[0], dtype=np.int32)
        if _plan(src_v, dst_v, order, ptr, in_src) != order.shape[0]:
            _sweep(graph)  # raises ReplayCycleError, naming the nodes
            raise ReplayCycleError("the replay graph has a cycle", np.arange(0))
        return cls(order, ptr, in_src)

    def replay(self, graph: ReplayGraph, key: np.ndarray | None = None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(start, end, binding predecessor per vertex or None) of ``graph``,
        whose edges are the plan's and whose weights may be any (a
        scenario's: apply_scenario). ``key``: per node, the order in which
        ties between binding sources go (binding_predecessors: the lowest
        source vertex, i.e. the position in ascending node id); given, the
        predecessors come back too."""
        if self.order is None:
            start, end = _sweep(graph)
            predecessor = None if key is None else binding_predecessors(graph, start, end)
            return start, end, predecessor
        value = np.empty(self.order.shape[0], dtype=np.int64)
        predecessor = np.empty(0 if key is None else value.shape[0], dtype=np.int64)
        weights = [np.ascontiguousarray(weight, dtype=np.int64)
                   for weight in (graph.delay, graph.work, graph.own, graph.anchor)]
        _evaluate(self.order, self.ptr, self.in_src, *weights, value,
                  np.empty(0, dtype=np.int64) if key is None
                  else np.ascontiguousarray(key, dtype=np.int64), predecessor)
        return value[0::2], value[1::2], None if key is None else predecessor


def drop_cyclic_parts(graph: ReplayGraph, part: np.ndarray,
                      ) -> tuple[ReplayGraph, dict[int, np.ndarray], dict[int, str]]:
    """``graph`` with every part that holds a cycle, or a node with no
    dependency that is no root, cut loose, and what was cut.

    ``part`` labels each node with its independent part of the graph (the
    replay models: run x iteration; edges never cross parts). Why: one odd
    run whose traces give crossing edges (two ranks' collectives matched in
    orders that disagree) must not take every run's replay down. A cut
    part's nodes keep their places (the arrays stay aligned with the node
    ids) but lose every edge and become roots at 0, so they replay
    trivially and the caller leaves their rows out. Returns the graph,
    per cut part label the nodes at fault in it (the cycle and what hangs
    on it, or the stray nodes), ascending, and per cut part label what was
    wrong (the error's ``what``: "has a cycle", "has nodes with no
    dependency that are no root"), for the caller's warning.
    """
    graph, _, cut, reasons = planned_without_cycles(graph, part)
    return graph, cut, reasons


def planned_without_cycles(graph: ReplayGraph, part: np.ndarray) -> tuple[
        ReplayGraph, ReplayPlan, dict[int, np.ndarray], dict[int, str]]:
    """drop_cyclic_parts, with the ReplayPlan of the graph it returns (so
    that a caller replaying it under many weights orders it only once)."""
    part = np.asarray(part, dtype=np.int64)
    cut: dict[int, np.ndarray] = {}
    reasons: dict[int, str] = {}
    while True:
        try:
            plan = ReplayPlan.of(graph)
        except UnreplayableGraphError as fault:
            labels = np.unique(part[fault.nodes])
            for label in labels.tolist():
                cut[label] = fault.nodes[part[fault.nodes] == label]
                reasons[label] = fault.what
            graph = _cut_loose(graph, np.isin(part, labels))
            continue
        return graph, plan, cut, reasons


def _cut_loose(graph: ReplayGraph, dropped: np.ndarray) -> ReplayGraph:
    """``graph`` without the edges that touch a ``dropped`` node, those nodes
    made roots anchored at 0 with no delay (drop_cyclic_parts)."""
    kept = ~(dropped[graph.src] | dropped[graph.dst])
    return ReplayGraph(
        delay=np.where(dropped, 0, graph.delay),
        work=graph.work,
        own=graph.own,
        anchor=np.where(dropped, 0, graph.anchor),
        is_root=graph.is_root | dropped,
        src=graph.src[kept],
        src_point=graph.src_point[kept],
        dst=graph.dst[kept],
        dst_point=graph.dst_point[kept],
        is_inconsistent=graph.is_inconsistent,
    )


def weigh(start: np.ndarray, end: np.ndarray, is_root: np.ndarray, src: np.ndarray,
          src_point: np.ndarray, dst: np.ndarray, dst_point: np.ndarray) -> ReplayGraph:
    """The replay graph of nodes with measured ``start``/``end`` and the given edges.

    Per node: start_ready / end_ready, the latest measured time among its
    start / end dependencies (a source's start or end, as the edge says);
    delay = start - start_ready (the straggler what-if paper's launch
    delay: launch latency, host work between calls); work = end - start
    where nothing ends the node from outside (a kernel, a runtime call),
    else 0; own = end - max(start + work, end_ready) (a collective member's
    transfer after the last arrival, a host sync's return after the GPU op
    it waited for). A negative delay or own time (a measured start before a
    dependency's measured end: a clock offset the alignment missed, an
    inferred edge that does not hold) is set to 0 and the node flagged
    ``is_inconsistent``. A root keeps its measured start as its anchor.
    """
    size = start.shape[0]
    lowest = np.iinfo(np.int64).min
    src_time = np.where(src_point == END, end[src], start[src])
    into_start = dst_point == START
    start_ready = np.full(size, lowest, dtype=np.int64)
    end_ready = np.full(size, lowest, dtype=np.int64)
    np.maximum.at(start_ready, dst[into_start], src_time[into_start])
    np.maximum.at(end_ready, dst[~into_start], src_time[~into_start])
    has_start_ready, has_end_ready = start_ready != lowest, end_ready != lowest
    raw_delay = np.where(has_start_ready, start - start_ready, 0)
    work = np.where(has_end_ready, 0, end - start)
    raw_own = end - np.maximum(start + work, np.where(has_end_ready, end_ready, start))
    return ReplayGraph(
        delay=np.maximum(raw_delay, 0),
        work=work,
        own=np.maximum(raw_own, 0),
        anchor=np.where(is_root, start, 0),
        is_root=is_root,
        src=src,
        src_point=src_point,
        dst=dst,
        dst_point=dst_point,
        is_inconsistent=(raw_delay < 0) | (raw_own < 0),
    )


def graph_from_relations(nodes, edges) -> tuple[np.ndarray, ReplayGraph]:
    """(node ids, weighed graph) from DuckDB relations of the replay models.

    ``nodes``: int_replay_nodes_listed (node_id unique, any bigint: a hash
    per trace, so that a trace's nodes keep their ids across incremental
    builds; measured start_ns, end_ns); ``edges``: int_replay_edges_typed.
    Both are relations (``dbt.ref`` in a Python model, ``connection.table``
    in a test), so the one loader serves the models and the tests, and this
    module needs no DuckDB import. Index ``i`` of every array is the node
    whose id is ``node_ids[i]``, the ids in ascending order (so a relation
    numbered 1..n puts node k at index k - 1); edges are mapped to indices
    by a sorted search, not a join. Raises ValueError when two nodes share
    an id (a hash collision) or an edge names a node that is not listed.
    """
    columns = nodes.select(
        "node_id, start_ns, end_ns, node_kind = 'iteration_start' as is_root").fetchnumpy()
    links = edges.select(
        "src_node_id, (src_point = 'end')::int as src_end, dst_node_id, "
        "(dst_point = 'end')::int as dst_end").fetchnumpy()
    order = np.argsort(np.asarray(columns["node_id"], dtype=np.int64), kind="stable")
    node_ids = np.asarray(columns["node_id"], dtype=np.int64)[order]
    graph = weigh(
        start=np.asarray(columns["start_ns"], dtype=np.int64)[order],
        end=np.asarray(columns["end_ns"], dtype=np.int64)[order],
        is_root=np.asarray(columns["is_root"], dtype=bool)[order],
        src=node_indices(node_ids, links["src_node_id"]),
        src_point=np.asarray(links["src_end"], dtype=np.int64),
        dst=node_indices(node_ids, links["dst_node_id"]),
        dst_point=np.asarray(links["dst_end"], dtype=np.int64),
    )
    return node_ids, graph


def node_indices(node_ids: np.ndarray, wanted) -> np.ndarray:
    """Index into ``node_ids`` (ascending, as graph_from_relations returns
    them) of every id in ``wanted``: the replay's arrays are indexed by
    position, the tables by node_id. Raises ValueError on a duplicate id in
    ``node_ids`` or an id of ``wanted`` not in it."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if node_ids.size > 1 and (repeated := node_ids[1:] == node_ids[:-1]).any():
        raise ValueError(f"replay node ids collide: {node_ids[1:][repeated][:5].tolist()} "
                         "are each listed twice (int_replay_nodes_listed.node_id)")
    # Searched in ascending order and put back: a binary search over random
    # hashes misses the cache on every step, sorted keys walk it in order
    # (a third of the time at 256 ranks, argsort included).
    order = np.argsort(wanted)
    position = np.empty(wanted.shape[0], dtype=np.intp)
    position[order] = np.searchsorted(node_ids, wanted[order])
    found = position < node_ids.size
    found[found] = node_ids[position[found]] == wanted[found]
    if not found.all():
        raise ValueError(f"{int((~found).sum())} ids name no replay node "
                         f"(first: {wanted[~found][:5].tolist()})")
    return position


def binding_predecessors(graph: ReplayGraph, start: np.ndarray, end: np.ndarray,
                         work: np.ndarray | None = None) -> np.ndarray:
    """For every vertex (2i start, 2i+1 end of node i) the vertex whose edge set
    its replayed time, or -1 for a root: the edge HTA's critical path follows.

    Ties go to a graph edge before a node's own start -> end edge, so a
    collective member's end is bound by its instance (the last arrival)
    rather than by its own start; among graph edges, to the lowest source
    vertex. Not to the edge listed first: the edges' order is the order the
    tables stored them in, which an incremental build and a full refresh do
    not share, and symmetric ranks (TP peers) tie everywhere.
    """
    n = graph.size
    src_v, dst_v, weight = vertex_edges(graph, work)
    value = np.empty(2 * n, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    reach = value[src_v] + weight
    best = np.full(2 * n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(best, dst_v, reach)
    binding = np.flatnonzero(reach == best[dst_v])
    # Rank each binding edge: graph edges by source vertex, own edges after all.
    rank = src_v[binding] + np.where(binding >= graph.src.shape[0], 2 * n, 0)
    chosen = np.full(2 * n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(chosen, dst_v[binding], rank)
    return np.where(chosen == np.iinfo(np.int64).max, -1, chosen % (2 * n))


def walk_back(predecessor: np.ndarray, sink: int) -> np.ndarray:
    """Vertices from the root to ``sink`` along ``predecessor`` (binding_predecessors)."""
    path = [sink]
    while predecessor[path[-1]] >= 0:
        path.append(int(predecessor[path[-1]]))
        if len(path) > predecessor.shape[0]:
            raise ValueError("binding predecessors form a cycle")
    return np.asarray(path[::-1], dtype=np.int64)
