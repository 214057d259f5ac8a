"""The replay's walk (tracehouse.core.replay): the compiled pass (_replay_walk.c)
and the numpy frontier sweep give the same times, on hand-made graphs whose
answer is worked out here, on random layered graphs, and they refuse a cycle
and a vertex no root reaches alike. Fast: in-memory graphs only (the replay of
real warehouses is tests/test_models_whatif.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tracehouse.core import replay as replay_module
from tracehouse.core.replay import (
    END,
    START,
    ReplayCycleError,
    ReplayGraph,
    ReplayPlan,
    ReplayStrayNodeError,
    binding_predecessors,
    drop_cyclic_parts,
    node_indices,
    replay,
    weigh,
)
from tracehouse.core.replay_scenarios import apply_scenario

COMPILED = pytest.param(True, id="compiled", marks=pytest.mark.skipif(
    replay_module._plan is None, reason="tracehouse/core/_replay_walk.c is not built"))
IMPLEMENTATIONS = [COMPILED, pytest.param(False, id="numpy")]


def _graph(size: int, edges: list[tuple[int, int, int, int]], delay, work, own,
           roots: dict[int, int]) -> ReplayGraph:
    """A graph from (src, src_point, dst, dst_point) edges and per-node weights."""
    src, src_point, dst, dst_point = (np.asarray(column, dtype=np.int64)
                                      for column in zip(*edges))
    anchor = np.zeros(size, dtype=np.int64)
    is_root = np.zeros(size, dtype=bool)
    for node, at in roots.items():
        anchor[node], is_root[node] = at, True
    return ReplayGraph(delay=np.asarray(delay, dtype=np.int64),
                       work=np.asarray(work, dtype=np.int64),
                       own=np.asarray(own, dtype=np.int64), anchor=anchor, is_root=is_root,
                       src=src, src_point=src_point, dst=dst, dst_point=dst_point,
                       is_inconsistent=np.zeros(size, dtype=bool))


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_two_ranks_meet_at_a_collective(compiled: bool) -> None:
    """Root 0 (t=100) -> kernel 1 (delay 5, work 50); root 2 (t=0) -> kernel 3
    (delay 5, work 10); both members of collective 4, each ending its own
    transfer (7, 3) after the last arrival: kernel 1 starts at 105, arrives
    then; kernel 3 starts at 5; the instance is at 105; ends 112 and 108."""
    graph = _graph(
        5,
        [(0, END, 1, START), (2, END, 3, START), (1, START, 4, START),
         (3, START, 4, START), (4, END, 1, END), (4, END, 3, END)],
        delay=[0, 5, 0, 5, 0], work=[0, 0, 0, 0, 0], own=[0, 7, 0, 3, 0],
        roots={0: 100, 2: 0},
    )
    start, end = replay(graph, compiled=compiled)
    assert start.tolist() == [100, 105, 0, 5, 105]
    assert end.tolist() == [100, 112, 0, 108, 105]


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_cycle_and_unrooted_vertex_are_refused(compiled: bool) -> None:
    cycle = _graph(3, [(0, END, 1, START), (1, END, 2, START), (2, END, 1, START)],
                   delay=[0, 0, 0], work=[0, 1, 1], own=[0, 0, 0], roots={0: 0})
    with pytest.raises(ValueError, match="cycle"):
        replay(cycle, compiled=compiled)
    stray = _graph(3, [(0, END, 1, START)], delay=[0, 0, 0], work=[0, 1, 1],
                   own=[0, 0, 0], roots={0: 0})
    with pytest.raises(ValueError, match="no root"):
        replay(stray, compiled=compiled)


def _crossed_and_clean_parts() -> tuple[ReplayGraph, np.ndarray]:
    """Two parts (labels 7 and 9). Part 7: two ranks (roots 0, 3) each run
    collectives A then B in thread order, rank 0 as A (1) -> B (2), rank 1
    as B (4) -> A (5); instances A (6) and B (7) matched by op across them,
    as an inferred group matches them: A waits for rank 1's A, which
    follows its B, which waits for rank 0's B, which follows its A, a
    cycle. Part 9: a root (8) and a kernel (9, delay 2, work 10)."""
    edges = [
        (0, END, 1, START), (1, END, 2, START), (3, END, 4, START), (4, END, 5, START),
        (1, START, 6, START), (5, START, 6, START), (6, END, 1, END), (6, END, 5, END),
        (2, START, 7, START), (4, START, 7, START), (7, END, 2, END), (7, END, 4, END),
        (8, END, 9, START),
    ]
    graph = _graph(10, edges, delay=[0, 1, 1, 0, 1, 1, 0, 0, 0, 2],
                   work=[0, 0, 0, 0, 0, 0, 0, 0, 0, 10], own=[0, 3, 3, 0, 3, 3, 0, 0, 0, 0],
                   roots={0: 0, 3: 0, 8: 50})
    return graph, np.array([7, 7, 7, 7, 7, 7, 7, 7, 9, 9])


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
def test_a_cycle_names_its_nodes(compiled: bool) -> None:
    graph, _ = _crossed_and_clean_parts()
    with pytest.raises(ReplayCycleError) as raised:
        replay(graph, compiled=compiled)
    assert set(raised.value.nodes.tolist()) <= set(range(8))
    assert {1, 2, 4, 5, 6, 7} <= set(raised.value.nodes.tolist())


def test_a_cyclic_part_is_cut_loose_and_the_rest_replays() -> None:
    """drop_cyclic_parts cuts part 7 (naming the nodes of its cycle) and
    leaves part 9 as it replays alone: root at 50, kernel 52..62."""
    graph, part = _crossed_and_clean_parts()
    acyclic, cut, why = drop_cyclic_parts(graph, part)
    assert list(cut) == [7] and why == {7: "has a cycle"}
    assert {1, 2, 4, 5, 6, 7} <= set(cut[7].tolist())
    start, end = replay(acyclic)
    assert (start[8], end[8], start[9], end[9]) == (50, 50, 52, 62)
    assert not (np.isin(acyclic.src, np.arange(8)) | np.isin(acyclic.dst, np.arange(8))).any()
    # A graph without a cycle comes back whole.
    clean = _graph(2, [(0, END, 1, START)], delay=[0, 2], work=[0, 10], own=[0, 0],
                   roots={0: 50})
    same, none_cut, none_why = drop_cyclic_parts(clean, np.zeros(2, dtype=np.int64))
    assert none_cut == {} and none_why == {} and same.src.tolist() == clean.src.tolist()


def test_compiled_and_numpy_agree_on_random_graphs() -> None:
    """Layered random graphs (edges only from lower to higher layers, so no
    cycle), weighed from random measured times, replayed both ways; the
    replay of weights taken from measured times gives those times back
    wherever no weight was clamped."""
    if replay_module._plan is None:
        pytest.skip("tracehouse/core/_replay_walk.c is not built")
    rng = np.random.default_rng(7)
    for _ in range(20):
        size = int(rng.integers(5, 400))
        layer = np.sort(rng.integers(0, 30, size))
        layer[0] = -1  # node 0 is the root
        count = int(rng.integers(size, 4 * size))
        src = rng.integers(0, size, count)
        dst = rng.integers(0, size, count)
        keep = layer[src] < layer[dst]
        src, dst = src[keep], dst[keep]
        src_point = rng.integers(0, 2, src.size)
        dst_point = rng.integers(0, 2, dst.size)
        # Every non-root node's start hangs off the root at least once.
        src = np.concatenate([src, np.zeros(size - 1, dtype=np.int64)])
        dst = np.concatenate([dst, np.arange(1, size)])
        src_point = np.concatenate([src_point, np.full(size - 1, END)])
        dst_point = np.concatenate([dst_point, np.full(size - 1, START)])
        start = (layer + 1) * 1000 + rng.integers(0, 500, size)
        end = start + rng.integers(0, 400, size)
        is_root = np.arange(size) == 0
        start[0] = end[0] = 0
        graph = weigh(start, end, is_root, src, src_point, dst, dst_point)
        fast = replay(graph, compiled=True)
        slow = replay(graph, compiled=False)
        assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
        consistent = ~graph.is_inconsistent
        if consistent.all():
            assert np.array_equal(fast[0], start) and np.array_equal(fast[1], end)


def test_node_ids_map_to_positions_and_collisions_are_refused() -> None:
    """Replay node ids are hashes (int_replay_ops_listed), not 1..n: the loader maps
    them to array positions by a sorted search, and refuses an id listed twice
    (a hash collision would otherwise merge two nodes) or one no node has."""
    ids = np.array([-9_000_000_000_000_000_000, -5, 7, 4_000_000_000_000_000_000])
    assert node_indices(ids, [7, -5, 4_000_000_000_000_000_000, 7]).tolist() == [2, 1, 3, 2]
    with pytest.raises(ValueError, match="name no replay node"):
        node_indices(ids, [8])
    with pytest.raises(ValueError, match="collide"):
        node_indices(np.array([1, 3, 3, 9]), [1])


def test_a_part_with_a_stray_node_is_cut_loose_and_the_rest_replays() -> None:
    """A node with no dependency that is no root (nothing says when it may
    start: an edge kind the SQL missed for an unusual trace) cuts its part
    loose, named with the node, and the other part replays; replay() alone
    raises naming it."""
    edges = [(0, END, 1, START), (2, END, 3, START), (4, END, 5, START)]
    graph = _graph(6, edges, delay=[0, 1, 0, 1, 0, 2], work=[5, 5, 5, 5, 0, 10],
                   own=[0, 0, 0, 0, 0, 0], roots={0: 0, 4: 50})
    with pytest.raises(ReplayStrayNodeError) as raised:
        replay(graph)
    assert raised.value.nodes.tolist() == [2]
    kept, cut, why = drop_cyclic_parts(graph, np.array([1, 1, 1, 1, 2, 2]))
    assert list(cut) == [1] and cut[1].tolist() == [2]
    assert why == {1: "has nodes with no dependency that are no root"}
    start, end = replay(kept)
    assert (start[4], end[4], start[5], end[5]) == (50, 50, 52, 62)


def _random_layered_graph(rng: np.random.Generator) -> ReplayGraph:
    """A random layered graph (no cycle) weighed from coarse random times, so
    that many dependencies tie (binding_predecessors' tie rule is exercised)."""
    size = int(rng.integers(5, 300))
    layer = np.sort(rng.integers(0, 20, size))
    layer[0] = -1
    count = int(rng.integers(size, 4 * size))
    src, dst = rng.integers(0, size, count), rng.integers(0, size, count)
    keep = layer[src] < layer[dst]
    # Every non-root node's start hangs off the root's end at least once.
    src = np.concatenate([src[keep], np.zeros(size - 1, dtype=np.int64)])
    dst = np.concatenate([dst[keep], np.arange(1, size)])
    src_point = np.concatenate([rng.integers(0, 2, keep.sum()), np.full(size - 1, END)])
    dst_point = np.concatenate([rng.integers(0, 2, keep.sum()), np.full(size - 1, START)])
    start = (layer + 1) * 100 + 10 * rng.integers(0, 3, size)
    end = start + 10 * rng.integers(0, 3, size)
    start[0] = end[0] = 0
    return weigh(start, end, np.arange(size) == 0, src, src_point, dst, dst_point)


@pytest.mark.skipif(replay_module._plan is None,
                    reason="tracehouse/core/_replay_walk.c is not built")
def test_a_plan_replays_any_weights_and_any_numbering_alike() -> None:
    """One ReplayPlan replays a graph under other weights (a scenario's) as a
    fresh numpy sweep does, and its binding predecessors are
    binding_predecessors', ties included; renumbering the nodes (the model
    numbers them in DuckDB's read order) with ``key`` the old order gives
    the same times and the same predecessors, renumbered."""
    rng = np.random.default_rng(11)
    for _ in range(30):
        graph = _random_layered_graph(rng)
        plan = ReplayPlan.of(graph)
        scaled = apply_scenario(graph, np.arange(graph.size),
                                duration=rng.integers(-1, 50, graph.size),
                                delay=rng.integers(-1, 20, graph.size))
        for weighed in (graph, scaled):
            start, end, predecessor = plan.replay(weighed, key=np.arange(graph.size))
            slow = replay(weighed, compiled=False)
            assert np.array_equal(start, slow[0]) and np.array_equal(end, slow[1])
            assert np.array_equal(predecessor, binding_predecessors(weighed, start, end))
        # Renumbered: new node k is old node order[k].
        order = rng.permutation(graph.size)
        new_of_old = np.empty_like(order)
        new_of_old[order] = np.arange(graph.size)
        moved = ReplayGraph(
            delay=scaled.delay[order], work=scaled.work[order], own=scaled.own[order],
            anchor=scaled.anchor[order], is_root=scaled.is_root[order],
            src=new_of_old[scaled.src], src_point=scaled.src_point,
            dst=new_of_old[scaled.dst], dst_point=scaled.dst_point,
            is_inconsistent=scaled.is_inconsistent[order])
        start, end, predecessor = plan.replay(scaled, key=np.arange(graph.size))
        moved_start, moved_end, moved_predecessor = ReplayPlan.of(moved).replay(moved, key=order)
        assert np.array_equal(moved_start, start[order]) and np.array_equal(moved_end, end[order])
        old_vertex = np.where(moved_predecessor >= 0,
                              2 * order[moved_predecessor // 2] + moved_predecessor % 2, -1)
        vertex_order = np.stack([2 * order, 2 * order + 1], axis=1).ravel()
        assert np.array_equal(old_vertex, predecessor[vertex_order])
