"""The slice order of one side of a GPU, from its sort keys alone, and its tracks.

Why: the streaming loader needs a side's rows in slice order (:mod:`.ordered`),
a batch at a time. SQLite could sort the rows, but its sort carried every
column of every row through the ADBC driver (~25 a row, ~100 ns each); here
only the keys are read (the row id and four or five integers a row, each
table in row id order), numpy sorts them (the tables come nearly in time order
already), and :mod:`.fetch` then reads each batch's rows by row id ranges.
The same keys give what the loader needs before the first batch: each track's
slice count (the tracks are numbered before any row is written) and the
correlation ids the device work carries (the CPU calls to keep for it).

Held per side: the order (an index into the keys) and the row ids, 12 bytes a
slice; the key columns are dropped once sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..numpy_arrow import distinct, distinct_inverse
from ..trace_types import TraceError
from .ordered import Arm, Ints, Side, cpu_keys
from .read import NsysDatabase


@dataclass
class SideOrder:
    """One side in slice order: ``order`` (slice position -> key index), ``rowids`` (key
    index -> its table's row id) and ``offsets`` (each arm's first key index; the last is
    the side's row count); ``tracks``: per track, its key and slice count (device:
    ``(stream, n)``; CPU: ``(kind, key, n)``; ``None`` for a NULL key, listed last);
    ``correlations``: the device work's distinct correlation ids, sorted (CPU: empty)."""

    side: Side
    order: np.ndarray
    rowids: np.ndarray
    offsets: np.ndarray
    tracks: list[tuple]
    correlations: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.offsets[-1])


def read_keys(db: NsysDatabase, arm: Arm, keys: tuple[str, ...]) -> pa.Table:
    """``arm``'s row ids and ``keys`` (those the export holds), in row id order."""
    sql = arm.select(keys) + " order by rowid"
    names = ["rowid", *(c for c in keys if c in arm.read)]
    schema = pa.schema([(name, pa.int64()) for name in names])

    def typed(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            return batch.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TraceError("invalid_sqlite", "a column holds values of an unexpected "
                             f"type: {exc}", "export the report again with "
                             "`nsys export --type sqlite`") from exc
    return db.query_batches(sql, typed)


def order_side(db: NsysDatabase, side: Side) -> SideOrder:
    """Read ``side``'s keys and sort them into slice order."""
    rowids, offsets, sort_keys = [], [0], []
    correlations = []
    for arm in side.arms:
        table = read_keys(db, arm, side.keys)
        n = table.num_rows

        def column(name: str, table: pa.Table = table, n: int = n) -> Ints:
            return Ints.of(table[name] if name in table.column_names else None, n)

        rowids.append(column("rowid").values)
        offsets.append(offsets[-1] + n)
        if side.cpu:
            kind, key, end = cpu_keys(arm.key == "nvtx", n, column)
            sort_keys.append((column("start"), kind, key, end))
        else:
            sort_keys.append((column("start"), column("streamId"), column("end")))
            corr = column("correlationId")
            correlations.append(corr.values[corr.valid])
        del table
    keys = [_joined([k[i] for k in sort_keys]) for i in range(len(sort_keys[0]))] \
        if sort_keys else []
    del sort_keys
    n = offsets[-1]
    if side.cpu:
        start, kind, key, end = keys if keys else (_empty(),) * 4
        tracks = _counts(key, kind.values)
        order = _lexsort([(start, False), (kind, False), (key, False), (end, True)], n)
    else:
        start, stream, end = keys if keys else (_empty(),) * 3
        tracks = _counts(stream)
        order = _lexsort([(start, False), (stream, False), (end, True)], n)
    return SideOrder(side=side, order=order,
                     rowids=np.concatenate(rowids) if rowids else np.zeros(0, np.int64),
                     offsets=np.array(offsets, dtype=np.int64), tracks=tracks,
                     correlations=(distinct(np.concatenate(correlations)) if correlations
                                   else np.zeros(0, dtype=np.int64)))


def _empty() -> Ints:
    return Ints(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))


def _joined(parts: list[Ints]) -> Ints:
    return Ints(np.concatenate([p.values for p in parts]),
                np.concatenate([p.valid for p in parts]))


def _lexsort(keys: list[tuple[Ints, bool]], n: int) -> np.ndarray:
    """Positions in the order of ``keys`` (most significant first; ``True``: descending),
    NULL last in each, ties in key index order (a stable sort: table, then row id)."""
    columns = []
    for column, descending in reversed(keys):
        values = ~column.values if descending else column.values
        if column.valid.all():
            columns.append(values)
        else:  # NULLs tie with each other whatever value they hold, and come last
            columns += [np.where(column.valid, values, 0), ~column.valid]
    if not columns:
        return np.arange(n, dtype=np.int64)
    order = np.lexsort(columns)
    return order.astype(np.int32) if n < 2**31 else order


def _counts(key: Ints, kind: np.ndarray | None = None) -> list[tuple]:
    """Each distinct ``key`` (a NULL as None, after the values) and its number of rows,
    in that order; with ``kind``, per kind first: ``(kind, key, n)``."""
    rows: list[tuple] = []
    for value in ([None] if kind is None else distinct(kind).tolist()):
        chosen = key.valid if value is None else key.valid & (kind == value)
        keys, inverse = distinct_inverse(key.values[chosen])
        counts = np.bincount(inverse, minlength=keys.size)
        found = [(int(k), int(c)) for k, c in zip(keys, counts)]
        nulls = int(np.count_nonzero(~key.valid if value is None
                                     else ~key.valid & (kind == value)))
        found += [(None, nulls)] if nulls else []
        rows += found if value is None else [(value, *row) for row in found]
    return rows
