"""A side's rows in slice order, a batch at a time, read by row id ranges.

Why ranges: :mod:`.slice_order` knows, for every slice position, its table and
row id. A batch's rows of one table are read with ``rowid between lo and hi``
(and the side's filter), which SQLite answers from its row id B-tree without a
sort; the export's tables are nearly in time order, so a batch's rows of a
table are one range or a few. A range is cut where more than
:data:`GAP_ROWS` of the side's rows of that table lie between two rows the
batch needs (they belong to other batches); shorter gaps are read with it and
left out, one query saved for up to that many rows read twice.

A batch comes as one :class:`Piece` per table (its rows in slice order, its
own columns only) and the position of each in the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..trace_types import TraceError
from .ordered import Arm, Ints
from .read import NsysDatabase
from .slice_order import SideOrder

#: Rows of a table, on the side but not in the batch, read rather than cut a range there.
GAP_ROWS = 1024


@dataclass
class Piece:
    """One activity table's rows of a batch: ``arm``, their positions in the batch
    (``at``, ascending) and the rows (``rows``: the arm's columns, in slice order)."""

    arm: Arm
    at: np.ndarray
    rows: pa.Table


@dataclass
class SideBatch:
    """``num_rows`` consecutive slices of a side, as :class:`Piece` s."""

    num_rows: int
    pieces: list[Piece]

    def ints(self, name: str) -> Ints:
        """Integer column ``name`` in batch order (NULL where a table has none)."""
        values = np.zeros(self.num_rows, dtype=np.int64)
        valid = np.zeros(self.num_rows, dtype=bool)
        for piece in self.pieces:
            if name in piece.rows.column_names:
                column = Ints.of(piece.rows[name], piece.rows.num_rows)
                values[piece.at] = column.values
                valid[piece.at] = column.valid
        return Ints(values, valid)

    def source(self) -> np.ndarray:
        """Each row's activity table code (:data:`.args.SOURCE_CODE`)."""
        codes = np.empty(self.num_rows, dtype=np.int64)
        for piece in self.pieces:
            codes[piece.at] = piece.arm.code
        return codes

    def table(self) -> pa.Table:
        """The batch as one table in slice order: ``src`` and the union of the pieces'
        columns (NULL where a table has none); for tests and inspection."""
        names = list(dict.fromkeys(c for piece in self.pieces for c in piece.rows.column_names))
        parts = []
        for piece in self.pieces:
            n = piece.rows.num_rows
            types = {f.name: f.type for p in self.pieces for f in p.rows.schema}
            parts.append(pa.table(
                {"src": pa.array(np.full(n, piece.arm.code, dtype=np.int64)),
                 **{c: piece.rows[c] if c in piece.rows.column_names else pa.nulls(n, types[c])
                    for c in names}}))
        if not parts:
            return pa.table({"src": pa.array([], pa.int64())})
        inverse = np.empty(self.num_rows, dtype=np.int64)
        inverse[np.concatenate([p.at for p in self.pieces])] = np.arange(self.num_rows)
        return pa.concat_tables(parts).take(pa.array(inverse))


def side_batches(db: NsysDatabase, side: SideOrder, batch_rows: int) -> Iterator[SideBatch]:
    """``side``'s rows in slice order, ``batch_rows`` at a time."""
    arm_of = np.repeat(np.arange(len(side.side.arms)), np.diff(side.offsets))
    for first in range(0, side.rows, batch_rows):
        index = side.order[first:first + batch_rows].astype(np.int64)
        arms = arm_of[index]
        pieces = []
        for i, arm in enumerate(side.side.arms):
            at = np.flatnonzero(arms == i)
            if at.size:
                ranks = index[at] - side.offsets[i]
                rowids = side.rowids[side.offsets[i]:side.offsets[i + 1]]
                pieces.append(Piece(arm, at, _rows(db, arm, rowids, ranks)))
        yield SideBatch(int(index.size), pieces)


def _rows(db: NsysDatabase, arm: Arm, rowids: np.ndarray, ranks: np.ndarray) -> pa.Table:
    """The rows of ``arm`` at ``ranks`` (positions among the side's rows of the table, whose
    row ids are ``rowids``), in that order."""
    wanted = np.sort(ranks)
    cuts = np.flatnonzero(np.diff(wanted) > GAP_ROWS + 1)
    firsts = np.r_[wanted[0], wanted[cuts + 1]]
    lasts = np.r_[wanted[cuts], wanted[-1]]
    parts = [_range(db, arm, int(rowids[a]), int(rowids[b]), int(b - a + 1))
             for a, b in zip(firsts, lasts)]
    read = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    # Rank r of range k is row (rows before range k) + (r - its first rank) of ``read``.
    before = np.r_[0, np.cumsum(lasts - firsts + 1)[:-1]]
    k = np.searchsorted(firsts, ranks, side="right") - 1
    at = before[k] + ranks - firsts[k]
    if at.size == read.num_rows and (at == np.arange(at.size)).all():
        return read
    return read.take(pa.array(at))


def _range(db: NsysDatabase, arm: Arm, lo: int, hi: int, expected: int) -> pa.Table:
    """The side's rows of ``arm`` with row ids from ``lo`` to ``hi`` (``expected`` of them),
    with every column of the arm (NULL where the export holds none)."""
    sql = f"{arm.select(arm.columns)} and rowid between {lo} and {hi} order by rowid"
    read_schema = pa.schema([f for f in arm.schema if f.name in arm.read])

    def typed(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            return batch.select(read_schema.names).cast(read_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TraceError("invalid_sqlite", "a column holds values of an unexpected "
                             f"type: {exc}", "export the report again with "
                             "`nsys export --type sqlite`") from exc
    table = db.query_batches(sql, typed)
    if table.num_rows != expected:
        raise TraceError("invalid_sqlite", f"{arm.table}: {table.num_rows} rows with row ids "
                         f"{lo}-{hi}, {expected} when first read",
                         "export the report again with `nsys export --type sqlite`")
    n = table.num_rows
    return pa.table([table[f.name] if f.name in arm.read else pa.nulls(n, f.type)
                     for f in arm.schema], schema=arm.schema)
