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
time, which are durations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

START, END = 0, 1


@dataclass(frozen=True)
class ReplayGraph:
    """Nodes ``0..n-1`` and their edges, as arrays.

    ``src``/``dst`` index nodes; ``src_point``/``dst_point`` are START or END.
    ``anchor`` holds a root's start and is ignored (any value) elsewhere;
    ``is_root`` says which nodes are roots.
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


def replay(graph: ReplayGraph, work: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Replayed (start, end) of every node, int64 ns.

    ``work`` replaces the graph's work durations (a what-if scenario scales
    them). Raises ValueError naming the nodes left when the graph has a cycle
    or a node no root reaches.
    """
    vertices = 2 * graph.size
    src_v, dst_v, weight = vertex_edges(graph, work)
    add = np.empty(vertices, dtype=np.int64)
    add[0::2] = graph.delay
    add[1::2] = graph.own
    order = np.argsort(src_v, kind="stable")
    src_v, dst_v, weight = src_v[order], dst_v[order], weight[order]
    first = np.searchsorted(src_v, np.arange(vertices + 1, dtype=np.int64))
    indegree = np.bincount(dst_v, minlength=vertices)
    best = np.full(vertices, np.iinfo(np.int64).min, dtype=np.int64)
    value = np.zeros(vertices, dtype=np.int64)
    root_start = 2 * np.flatnonzero(graph.is_root)
    frontier = np.flatnonzero(indegree == 0)
    stray = np.setdiff1d(frontier, root_start)
    if stray.size:
        raise ValueError(f"{stray.size} replay vertices have no dependency and are no root "
                         f"(first nodes: {(stray[:5] // 2).tolist()})")
    value[frontier] = graph.anchor[frontier // 2]
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
        raise ValueError(f"the replay graph has a cycle: {left.size} vertices never resolved "
                         f"(first nodes: {(left[:5] // 2).tolist()})")
    return value[0::2], value[1::2]


def graph_from_relations(nodes, edges) -> tuple[np.ndarray, ReplayGraph]:
    """(node ids, graph) from DuckDB relations of the replay models.

    ``nodes``: int_replay_nodes_weighted (node_id 1..n, no gaps); ``edges``:
    int_replay_edges_typed. Both are relations (``dbt.ref`` in a Python model,
    ``connection.table`` in a test), so the one loader serves the model and
    the tests, and this module needs no DuckDB import.
    """
    columns = nodes.select(
        "node_id, start_delay_ns, work_ns, own_ns, coalesce(anchor_ns, 0) as anchor_ns, "
        "node_kind = 'iteration_start' as is_root").order("node_id").fetchnumpy()
    links = edges.select(
        "src_node_id, (src_point = 'end')::int as src_end, dst_node_id, "
        "(dst_point = 'end')::int as dst_end").fetchnumpy()
    node_id = np.asarray(columns["node_id"], dtype=np.int64)
    if node_id.size and not np.array_equal(node_id, np.arange(1, node_id.size + 1)):
        raise ValueError("int_replay_nodes_weighted.node_id must run 1..n without gaps")
    graph = ReplayGraph(
        delay=np.asarray(columns["start_delay_ns"], dtype=np.int64),
        work=np.asarray(columns["work_ns"], dtype=np.int64),
        own=np.asarray(columns["own_ns"], dtype=np.int64),
        anchor=np.asarray(columns["anchor_ns"], dtype=np.int64),
        is_root=np.asarray(columns["is_root"], dtype=bool),
        src=np.asarray(links["src_node_id"], dtype=np.int64) - 1,
        src_point=np.asarray(links["src_end"], dtype=np.int64),
        dst=np.asarray(links["dst_node_id"], dtype=np.int64) - 1,
        dst_point=np.asarray(links["dst_end"], dtype=np.int64),
    )
    return node_id, graph


def binding_predecessors(graph: ReplayGraph, start: np.ndarray, end: np.ndarray,
                         work: np.ndarray | None = None) -> np.ndarray:
    """For every vertex (2i start, 2i+1 end of node i) the vertex whose edge set
    its replayed time, or -1 for a root: the edge HTA's critical path follows.

    Ties go to the edge listed first (graph edges before a node's own
    start -> end edge), so a collective member's end is bound by its
    instance (the last arrival) rather than by its own start.
    """
    n = graph.size
    src_v, dst_v, weight = vertex_edges(graph, work)
    value = np.empty(2 * n, dtype=np.int64)
    value[0::2], value[1::2] = start, end
    reach = value[src_v] + weight
    best = np.full(2 * n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(best, dst_v, reach)
    binding = np.flatnonzero(reach == best[dst_v])
    targets, first = np.unique(dst_v[binding], return_index=True)
    predecessor = np.full(2 * n, -1, dtype=np.int64)
    predecessor[targets] = src_v[binding[first]]
    return predecessor


def walk_back(predecessor: np.ndarray, sink: int) -> np.ndarray:
    """Vertices from the root to ``sink`` along ``predecessor`` (binding_predecessors)."""
    path = [sink]
    while predecessor[path[-1]] >= 0:
        path.append(int(predecessor[path[-1]]))
        if len(path) > predecessor.shape[0]:
            raise ValueError("binding predecessors form a cycle")
    return np.asarray(path[::-1], dtype=np.int64)
