"""Slice nesting per thread track, and binding flow endpoints to slices.

Kineto writes complete (``X``) events without parent links; Perfetto
rebuilds them with a stack per thread and *drops* an event that starts
inside an open slice but ends after it (``slice_drop_overlapping_complete_event``).
On real traces that drops ``ProfilerStep#N``, ``gloo:send``/``gloo:recv``
waits and optimizer frames. We keep such an event, flag it
``is_partial_overlap`` and give it as parent the deepest open slice that
*fully* contains it, so every event stays countable.

Why vectorised: a Python stack walk costs ~2 µs per event, more than the
whole ingest budget. With slices sorted by (track, start, longest first),
the parent of slice *i* is the nearest earlier slice on its track whose end
is >= *i*'s end (a "previous greater element" query), answered for all
slices at once by binary lifting over a sparse table of running maxima.
Depth follows by pointer jumping; the partial-overlap flag is a range-max
query over the slices between a slice and its parent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .numpy_arrow import distinct

try:
    from ._nesting import nest as _nest
except ImportError:  # built without a C compiler: the numpy version
    _nest = None


@dataclass
class Nesting:
    """Per-slice results in the slices' original order."""

    parent: np.ndarray  # int64, -1 for roots
    depth: np.ndarray  # int64
    partial: np.ndarray  # bool
    #: Slice indices sorted by (track, start, longest first), ties in index order:
    #: the order bind_flow_endpoints searches, kept so it is sorted once per trace.
    order: np.ndarray | None = None


def _sparse_max(values: np.ndarray) -> list[np.ndarray]:
    """``levels[k][j] = max(values[j - 2**k + 1 .. j])`` (clipped at 0)."""
    levels = [values]
    step = 1
    while step < values.size:
        prev = levels[-1]
        cur = prev.copy()
        cur[step:] = np.maximum(prev[step:], prev[:-step])
        levels.append(cur)
        step *= 2
    return levels


def _range_max(levels: list[np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Max over ``[lo, hi]`` for each pair (caller guarantees lo <= hi)."""
    length = hi - lo + 1
    k = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(lo.size, dtype=levels[0].dtype)
    for level in distinct(k).tolist():
        sel = k == level
        table = levels[level]
        out[sel] = np.maximum(table[hi[sel]], table[lo[sel] + (1 << level) - 1])
    return out


def nest_slices(track: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                compiled: bool | None = None) -> Nesting:
    """Compute parent, depth and the partial-overlap flag for every slice.

    ``compiled``: the one-pass stack of ``_nesting.c`` (``None``: when it is
    built), else the numpy version below; both give the same arrays.
    """
    n = track.size
    if n == 0:
        return Nesting(np.full(0, -1, dtype=np.int64), np.zeros(0, dtype=np.int64),
                       np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64))
    order = slice_order(track, ts, dur)
    if compiled is None:
        compiled = _nest is not None
    if compiled:
        parent = np.empty(n, dtype=np.int64)
        depth = np.empty(n, dtype=np.int64)
        partial = np.empty(n, dtype=bool)
        _nest(order, *(np.ascontiguousarray(a, dtype=np.int64) for a in (track, ts, dur)),
              parent, depth, partial)
        return Nesting(parent, depth, partial, order)
    nesting = _nest_numpy(order, track, ts, dur)
    nesting.order = order
    return nesting


def slice_order(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Slice indices by (track, start, longest first), ties in index order (a stable sort)."""
    return np.lexsort((-dur, ts, track))


def _nest_numpy(order: np.ndarray, track: np.ndarray, ts: np.ndarray,
                dur: np.ndarray) -> Nesting:
    """Binary lifting over a sparse table of running maxima (see the module's docstring)."""
    n = track.size
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    partial = np.zeros(n, dtype=bool)
    tr = track[order]
    start = ts[order]
    end = start + dur[order]
    # A zero-length slice exactly at another slice's end is not inside it.
    need = np.where(end == start, end + 1, end)

    levels = _sparse_max(end)
    pos = np.arange(n, dtype=np.int64) - 1
    for k in range(len(levels) - 1, -1, -1):
        step = 1 << k
        inside = pos - step + 1 >= 0
        probe = np.where(inside, pos, 0)
        skip = inside & (levels[k][probe] < need)
        pos = np.where(skip, pos - step, pos)
    same_track = pos >= 0
    same_track[same_track] = tr[pos[same_track]] == tr[same_track]
    parent_sorted = np.where(same_track, pos, -1)

    # Partial overlap: a slice between the parent and i (same track) still
    # open when i starts, i.e. one that i starts inside and outlives.
    track_first = np.zeros(n, dtype=np.int64)
    boundaries = np.flatnonzero(np.diff(tr)) + 1
    track_first[boundaries] = boundaries
    track_first = np.maximum.accumulate(track_first)
    lo = np.maximum(parent_sorted + 1, track_first)
    hi = np.arange(n, dtype=np.int64) - 1
    check = np.flatnonzero(lo <= hi)
    partial_sorted = np.zeros(n, dtype=bool)
    if check.size:
        partial_sorted[check] = _range_max(levels, lo[check], hi[check]) > start[check]

    # Depth by pointer jumping: O(n log depth).
    dist = (parent_sorted >= 0).astype(np.int64)
    anc = parent_sorted.copy()
    active = np.flatnonzero(anc >= 0)
    while active.size:
        up = anc[active]
        has = anc[up] >= 0
        dist[active] = dist[active] + dist[up]
        anc[active] = np.where(has, anc[up], -1)
        active = active[has]

    has_parent = parent_sorted >= 0
    parent[order[has_parent]] = order[parent_sorted[has_parent]]
    depth[order] = dist
    partial[order] = partial_sorted
    return Nesting(parent, depth, partial)


def _pair_keys(track: np.ndarray, ts: np.ndarray, point_track: np.ndarray,
               point_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(track, ts) pairs as one sortable key: a packed int64 when it fits, else records."""
    lo = min(int(ts.min()), int(point_ts.min()))
    hi = max(int(ts.max()), int(point_ts.max()))
    top = max(int(track.max()), int(point_track.max()))
    span_bits = max(hi - lo, 1).bit_length()
    if span_bits + max(top, 1).bit_length() <= 62:
        return ((track << span_bits) | (ts - lo), (point_track << span_bits) | (point_ts - lo))
    return (np.rec.fromarrays([track, ts], names="tr,ts"),
            np.rec.fromarrays([point_track, point_ts], names="tr,ts"))


def bind_flow_endpoints(
    track: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    parent: np.ndarray,
    point_track: np.ndarray,
    point_ts: np.ndarray,
    enclosing: np.ndarray,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Slice index each flow endpoint binds to, or -1.

    As in the Chrome trace format and Perfetto: an endpoint with
    ``enclosing`` binds to the deepest slice on its track open at its time;
    otherwise (``f`` without ``bp: "e"``) to the next slice that starts at or
    after it. ``order``: :func:`slice_order` of the slices when the caller has
    it (:attr:`Nesting.order`); sorting is most of this function's time.
    """
    m = point_track.size
    result = np.full(m, -1, dtype=np.int64)
    if m == 0 or track.size == 0:
        return result
    end = ts + dur
    # Sorted by (track, start, longest first): the last slice starting at or
    # before t on the track is the deepest candidate.
    if order is None:
        order = slice_order(track, ts, dur)
    sorted_track = track[order]
    sorted_ts = ts[order]
    keys, probes = _pair_keys(sorted_track, sorted_ts, point_track, point_ts)
    right = np.searchsorted(keys, probes, side="right") - 1
    left = np.searchsorted(keys, probes, side="left")

    ok = (right >= 0)
    ok[ok] = sorted_track[right[ok]] == point_track[ok]
    candidate = np.where(ok, order[np.maximum(right, 0)], -1)
    enc = enclosing & (candidate >= 0)
    # Climb to an ancestor that is still open at t (rare: only when the
    # latest-starting slice had already ended).
    closed = np.flatnonzero(enc & (end[np.maximum(candidate, 0)] < point_ts))
    for point in closed.tolist():
        c = int(candidate[point])
        t = int(point_ts[point])
        while c >= 0 and int(end[c]) < t:
            c = int(parent[c])
        candidate[point] = c
    result[enclosing] = candidate[enclosing]

    nxt = ~enclosing
    ok_next = nxt & (left < order.size)
    ok_next[ok_next] = sorted_track[left[ok_next]] == point_track[ok_next]
    result[ok_next] = order[left[ok_next]]
    return result
