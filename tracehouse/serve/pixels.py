"""The timeline's level of detail: each lane × pixel cell's longest kernel, picked in NumPy.

Why not in SQL (what the timeline did until 2026-11-27): ``group by`` cell
with one ``arg_max`` per drawn column over a 128-bit key (longest, then
earliest, then lowest slice id) cost 118-146 CPU ms for all 1,024 ranks
at 1/16 of an iteration (~125,000 kernels into ~49,000 cells), most of it
the string columns carried through the aggregate's states. Here the
window's kernels are read once as numbers (the strings as DuckDB's
``hash`` of them), the winner of each cell is found with a few vectorised
passes, and only the winners' strings are looked up, in a process-wide
memo of hash → text filled from the window on a miss
(benchmarks/README.md has the figures).

The winner is the one the SQL picked: the longest kernel of the cell, of
equally long ones the earliest, then the one with the lowest slice id, so
that the same window always draws the same kernel. A cell is the kernel's
lane and the pixel of its start (clamped to the window's start).
"""

from __future__ import annotations

import threading
from typing import Any

import duckdb
import numpy as np

from tracehouse.serve.marts import bound

#: The string columns drawn, read as their hashes (``<column>_key``) and looked up in the memo.
TEXT_COLUMNS = ("kind", "name", "trace_id")
#: Most hash → text entries the memo keeps (a run has a few thousand distinct strings).
MEMO_LIMIT = 200_000
_MEMO: dict[int, str | None] = {}
_MEMO_LOCK = threading.Lock()


class HashCollision(Exception):
    """Two different strings with one 64-bit hash in a window: the caller answers another way."""


def kernel_rows_sql(kernels: str) -> str:
    """The query reading every kernel of the ``kernels`` CTE (fixed text) as numbers."""
    keys = ", ".join(f"hash({column}) as {column}_key" for column in TEXT_COLUMNS)
    return f"with {kernels} select rank, stream, ts, dur, slice_id, {keys} from kernels"


def longest_per_cell(cur: duckdb.DuckDBPyConnection, kernels: str, params: dict[str, Any],
                     lane_keys: list[tuple[int, Any]], start: int, step: int,
                     buckets: int) -> dict[str, Any]:
    """Each cell's longest kernel among the ``kernels`` CTE's rows (fixed text, bound by
    ``params``), cells in lane then time order, as NumPy columns: ``lane`` (an index into
    ``lane_keys``, the lanes as (rank, stream or None) in order), ``kernels`` (how many the
    cell holds), ``ts``, ``dur``, ``slice_id``; and ``kind``, ``name``, ``trace_id`` each as
    (codes, texts): the winner's text is ``texts[code]``. Cells are ``step`` ns wide from
    ``start``, ``buckets`` per lane."""
    sql = kernel_rows_sql(kernels)
    found = cur.execute(sql, bound(sql, params)).fetchnumpy()
    lane = _lane_of(np.asarray(found["rank"], dtype=np.int64), found["stream"], lane_keys)
    ts, dur = np.asarray(found["ts"], dtype=np.int64), np.asarray(found["dur"], dtype=np.int64)
    slice_id = np.asarray(found["slice_id"], dtype=np.int64)
    cell = lane * buckets + (np.maximum(ts, start) - start) // step
    winners, counts = _winners(cell, dur, ts, slice_id, len(lane_keys) * buckets)
    keys = {column: np.asarray(found[f"{column}_key"])[winners] for column in TEXT_COLUMNS}
    return {"lane": lane[winners], "kernels": counts, "ts": ts[winners], "dur": dur[winners],
            "slice_id": slice_id[winners], **_texts(cur, kernels, params, keys)}


def _lane_of(rank: np.ndarray, stream: Any, lane_keys: list[tuple[int, Any]]) -> np.ndarray:
    """Each row's lane index: its (rank, stream) among ``lane_keys`` (stream None: the rank's
    one lane, whatever stream the row is on)."""
    by_stream = any(lane_stream is not None for _, lane_stream in lane_keys)
    if by_stream:
        key = rank * (1 << 32) + np.ma.filled(np.ma.asarray(stream), -1).astype(np.int64)
        known = np.array([r * (1 << 32) + (-1 if s is None else s) for r, s in lane_keys],
                         dtype=np.int64)
    else:
        key, known = rank, np.array([r for r, _ in lane_keys], dtype=np.int64)
    order = np.argsort(known, kind="stable")
    place = np.searchsorted(known[order], key)
    if len(key) and (place.max() >= len(known) or (known[order][place] != key).any()):
        raise ValueError("a kernel outside the view's lanes")  # the lanes come from the rows
    return order[place]


def _winners(cell: np.ndarray, dur: np.ndarray, ts: np.ndarray, slice_id: np.ndarray,
             cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The row index of each non-empty cell's longest kernel (then earliest, then lowest
    slice id; of rows equal in all three, the first) and the cell's row count, cells in
    order. Three reductions by cell narrow the candidates: no sort of all rows."""
    if not len(cell):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    candidates = np.arange(len(cell))
    for values, reduce, empty in ((dur, np.maximum, np.iinfo(np.int64).min),
                                  (ts, np.minimum, np.iinfo(np.int64).max),
                                  (slice_id, np.minimum, np.iinfo(np.int64).max)):
        best = np.full(cells, empty, dtype=np.int64)
        reduce.at(best, cell[candidates], values[candidates])
        candidates = candidates[values[candidates] == best[cell[candidates]]]
    filled, first = np.unique(cell[candidates], return_index=True)
    return candidates[first], np.bincount(cell, minlength=cells)[filled]


def _texts(cur: duckdb.DuckDBPyConnection, kernels: str, params: dict[str, Any],
           keys: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, list[str | None]]]:
    """Each column's hashes in ``keys`` as (codes, texts), the texts from the memo; the
    window's strings are read into it (``kernels`` CTE) when one is missing."""
    distinct = {column: np.unique(values, return_inverse=True)
                for column, values in keys.items()}
    missing = [column for column, (unique, _codes) in distinct.items()
               if any(key not in _MEMO for key in unique.tolist())]
    if missing:
        _remember(cur, kernels, params, missing)
    return {column: (codes.astype(np.int64), [_MEMO[key] for key in unique.tolist()])
            for column, (unique, codes) in distinct.items()}


def _remember(cur: duckdb.DuckDBPyConnection, kernels: str, params: dict[str, Any],
              columns: list[str]) -> None:
    """Put the distinct strings of ``columns`` among the window's kernels into the memo,
    by hash, in one read of the window; raise :class:`HashCollision` if two differ with
    one hash."""
    # ``columns`` are of TEXT_COLUMNS: fixed names.
    pairs = ", ".join(f"hash({column}), {column}" for column in columns)
    sql = f"with {kernels} select distinct {pairs} from kernels"  # noqa: S608
    found = cur.execute(sql, bound(sql, params)).fetchall()
    with _MEMO_LOCK:
        if len(_MEMO) + len(found) * len(columns) > MEMO_LIMIT:
            _MEMO.clear()
        for row in found:
            for key, text in zip(row[::2], row[1::2]):
                if _MEMO.setdefault(int(key), text) != text:
                    raise HashCollision(f"{text!r} and {_MEMO[int(key)]!r}")
