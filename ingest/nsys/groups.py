"""A Parquet file written in row groups of a fixed size as its rows come, in any pieces.

Why: the Nsight loader produces a GPU's rows a batch at a time (:mod:`.stream`),
while the lake's files hold full row groups of :data:`ROW_GROUP_ROWS` (the last
of a part shorter), as the lake writer (:mod:`ingest.lake`) cuts a whole table.
Rows are held only until a group is full, so the file's rows never are.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: Rows per row group, as the lake writer writes the Nsight tables.
ROW_GROUP_ROWS = 256 * 1024


class GroupedWriter:
    """Writes ``schema`` rows to ``path`` in groups of ``group_rows``.

    ``options(rows)`` gives the writer's options, asked when the first group is
    written: ``rows`` is then the number of rows known (a full group's, or every
    row's when the file ends before one fills), for the lake's rule that a small
    table is written plain (:func:`ingest.lake._write_options`). ``group_rows``:
    :data:`ROW_GROUP_ROWS` when None (looked up now, so a test may shrink it).
    """

    def __init__(self, path: Path, schema: pa.Schema,
                 options: Callable[[int], dict[str, object]],
                 group_rows: int | None = None) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self._options = options
        self._group_rows = group_rows or ROW_GROUP_ROWS
        self._held: list[pa.Table] = []
        self._held_rows = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        """Add rows; every group they fill is written now."""
        if not table.num_rows:
            return
        self._held.append(table)
        self._held_rows += table.num_rows
        self.rows += table.num_rows
        if self._held_rows >= self._group_rows:
            held = pa.concat_tables(self._held)
            full = held.num_rows - held.num_rows % self._group_rows
            self._write(held.slice(0, full))
            rest = held.slice(full)
            self._held, self._held_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def end_part(self) -> None:
        """Write the rows held as a (short) group of their own: the next rows start a new
        group (the lake's ``has_role`` rows and the others never share one)."""
        if self._held_rows:
            self._write(pa.concat_tables(self._held))
        self._held, self._held_rows = [], 0

    def close(self, write_empty: bool = False) -> None:
        """Write what is held and close the file (with its schema alone when no row came;
        ``write_empty``: as the lake writer writes an empty table, with an empty group)."""
        self.end_part()
        if self._writer is None:
            self._open(0)
            if write_empty:
                self._writer.write_table(self.schema.empty_table(),
                                         row_group_size=self._group_rows)
        self._writer.close()

    def _open(self, rows: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.path, self.schema, **self._options(rows))

    def _write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._open(max(self.rows, table.num_rows))
        self._writer.write_table(table.cast(self.schema), row_group_size=self._group_rows)

    def abort(self) -> None:
        """Close without finishing (the caller discards the file)."""
        if self._writer is not None:
            self._writer.close()
