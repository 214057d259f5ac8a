"""Slice nesting and flow binding, against a plain stack-walk reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracehouse.ingest import nesting
from tracehouse.ingest.nesting import bind_flow_endpoints, nest_slices

#: Both implementations: the compiled stack (_nesting.c) where built, and numpy.
IMPLEMENTATIONS = [pytest.param(True, id="compiled", marks=pytest.mark.skipif(
    nesting._nest is None, reason="ingest/_nesting.c is not built")),
    pytest.param(False, id="numpy")]


def reference_nesting(track, ts, dur):
    """Quadratic but obviously right: parent = deepest earlier open slice that contains it."""
    n = len(track)
    order = sorted(range(n), key=lambda i: (track[i], ts[i], -dur[i], i))
    position = {i: k for k, i in enumerate(order)}
    parent, depth, partial = [-1] * n, [0] * n, [False] * n
    for k, i in enumerate(order):
        start, end = ts[i], ts[i] + dur[i]
        need = end + 1 if dur[i] == 0 else end  # an instant at a slice's end is outside it
        for j in reversed(order[:k]):
            if track[j] != track[i]:
                break
            if ts[j] + dur[j] >= need:
                parent[i] = j
                break
        first = position[parent[i]] + 1 if parent[i] >= 0 else 0
        partial[i] = any(track[j] == track[i] and ts[j] + dur[j] > start
                         for j in order[first:k])
        p = parent[i]
        while p >= 0:
            depth[i] += 1
            p = parent[p]
    return parent, depth, partial


def _arrays(rows):
    track = np.array([r[0] for r in rows], dtype=np.int64)
    ts = np.array([r[1] for r in rows], dtype=np.int64)
    dur = np.array([r[2] for r in rows], dtype=np.int64)
    return track, ts, dur


def test_nested_touching_and_partial() -> None:
    # track 0: A [0,100] > B [10,50]; C [20,80] starts in B and outlives it (flagged,
    # parent A); D [30,40] lies in B and C, and C, the later-opened, is the deeper;
    # E [100,120] touches A's end (a sibling); instant F at 100 is E's start, not A's end.
    rows = [(0, 0, 100), (0, 10, 40), (0, 20, 60), (0, 30, 10), (0, 100, 20), (0, 100, 0)]
    result = nest_slices(*_arrays(rows))
    assert result.parent.tolist() == [-1, 0, 0, 2, -1, 4]
    assert result.depth.tolist() == [0, 1, 1, 2, 0, 1]
    assert result.partial.tolist() == [False, False, True, False, False, False]


def test_tracks_do_not_nest_into_each_other() -> None:
    rows = [(0, 0, 100), (1, 10, 5), (0, 10, 5)]
    result = nest_slices(*_arrays(rows))
    assert result.parent.tolist() == [-1, -1, 0]


def test_empty() -> None:
    result = nest_slices(*_arrays([]))
    assert result.parent.size == 0


slices = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 40)), max_size=60
)


@pytest.mark.parametrize("compiled", IMPLEMENTATIONS)
@settings(max_examples=300, deadline=None)
@given(rows=slices)
def test_matches_reference(compiled: bool, rows) -> None:
    track, ts, dur = _arrays(rows)
    result = nest_slices(track, ts, dur, compiled=compiled)
    parent, depth, partial = reference_nesting(track.tolist(), ts.tolist(), dur.tolist())
    assert result.parent.tolist() == parent
    assert result.depth.tolist() == depth
    assert result.partial.tolist() == partial


def test_implementations_agree_at_the_int64_edge() -> None:
    """An instant at INT64_MAX (its "end + 1" wraps, as numpy's does) and deep stacks."""
    top = 2**63 - 1
    rows = [(0, top - 10, 10), (0, top, 0), (0, top - 5, 5), (1, 0, 10**6)]
    rows += [(1, k, 10**6 - 2 * k) for k in range(1, 500)]
    if nesting._nest is None:
        pytest.skip("ingest/_nesting.c is not built")
    fast, slow = (nest_slices(*_arrays(rows), compiled=c) for c in (True, False))
    assert fast.parent.tolist() == slow.parent.tolist()
    assert fast.depth.tolist() == slow.depth.tolist()
    assert fast.partial.tolist() == slow.partial.tolist()


def test_flow_binding_enclosing_and_next() -> None:
    # track 0: A [0,100] > B [10,20]; track 1: K [50,60]
    track, ts, dur = _arrays([(0, 0, 100), (0, 10, 10), (1, 50, 10)])
    parent = nest_slices(track, ts, dur).parent
    points_track = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    points_ts = np.array([15, 30, 10, 50, 40, 70], dtype=np.int64)
    enclosing = np.array([True, True, True, True, False, False])
    bound = bind_flow_endpoints(track, ts, dur, parent, points_track, points_ts, enclosing)
    # 15 is inside B; 30 only inside A; 10 is B's start (deepest); 50 is K's start;
    # "next slice" binding from 40 is K; nothing starts at or after 70 on track 1.
    assert bound.tolist() == [1, 0, 1, 2, 2, -1]
