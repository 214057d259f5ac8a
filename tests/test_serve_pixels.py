"""The timeline's per-pixel pick (:mod:`tracehouse.serve.pixels`) against a plain Python oracle.

Fast (no warehouse): cells full of ties, as simulated and real traces have
(kernels of one shape run for the same time), are where a vectorised pick
goes wrong; tests/test_serve_timeline.py checks the whole view on real
marts against fct_kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracehouse.serve.pixels import _lane_of, _winners


def _oracle(cell, dur, ts, slice_id):
    best: dict[int, int] = {}
    counts: dict[int, int] = {}
    for row in range(len(cell)):
        key = (-dur[row], ts[row], slice_id[row])
        counts[cell[row]] = counts.get(cell[row], 0) + 1
        if cell[row] not in best or key < (-dur[best[cell[row]]], ts[best[cell[row]]],
                                           slice_id[best[cell[row]]]):
            best[cell[row]] = row
    cells = sorted(best)
    return [best[c] for c in cells], [counts[c] for c in cells]


@pytest.mark.parametrize("seed", range(6))
def test_each_cell_gets_its_longest_then_earliest_then_lowest_slice(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 3000))
    cell = rng.integers(0, 40, rows)
    dur = rng.integers(0, 4, rows) * 1000  # few lengths: many ties
    ts = rng.integers(0, 5, rows) * 10
    slice_id = rng.permutation(rows)
    winners, counts = _winners(cell, dur, ts, slice_id, 40)
    expected_winners, expected_counts = _oracle(cell, dur, ts, slice_id)
    assert winners.tolist() == expected_winners
    assert counts.tolist() == expected_counts


def test_rows_equal_in_every_key_give_the_first_and_no_rows_give_nothing() -> None:
    winners, counts = _winners(np.array([3, 3, 1]), np.array([5, 5, 2]), np.array([7, 7, 0]),
                               np.array([9, 9, 1]), 4)
    assert winners.tolist() == [2, 0] and counts.tolist() == [1, 2]
    empty = np.zeros(0, dtype=np.int64)
    assert [a.tolist() for a in _winners(empty, empty, empty, empty, 4)] == [[], []]


def test_lanes_by_stream_and_by_rank() -> None:
    ranks = np.array([4, 4, 0, 4])
    streams = np.ma.masked_array([7, 13, 7, 7], mask=[False, False, False, False])
    lanes = [(0, 7), (4, 7), (4, 13)]
    assert _lane_of(ranks, streams, lanes).tolist() == [1, 2, 0, 1]
    nulls = np.ma.masked_array([0, 0, 0, 0], mask=[True] * 4)
    assert _lane_of(ranks, nulls, [(0, None), (4, None)]).tolist() == [1, 1, 0, 1]
    with pytest.raises(ValueError, match="outside the view's lanes"):
        _lane_of(np.array([2]), nulls[:1], [(0, None), (4, None)])
