"""Any warehouse table or mart to CSV or Parquet: ``tracehouse export table``.

Why a function of its own (``tracehouse sql ... --format csv`` prints
results too): exports are files other tools pick up from cron, so they must
be complete or absent, typed (Parquet keeps integers, lists and timestamps),
and fast on big marts (DuckDB's ``COPY`` streams out of core). The table name
is the one piece of SQL text that comes from the caller: it is looked up in
``information_schema`` first and only the name found there is quoted into the
statement; the run filter and the output path are bound parameters.

The raw lake tables (``slices``, ``traces``, …) are exported under those
names with the lake's columns, before and after the first ``tracehouse
build``, through the same views as ``tracehouse sql``
(:func:`tracehouse.query.lake_connection.connect`). A run filter naming a run the table does
not hold is an error listing the runs it does hold, never an empty file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.query.catalog import resolve_table, table_names
from tracehouse.query.lake_connection import connect, lake_tables
from tracehouse.reports.files import publish_mode

#: Formats and the file suffixes that imply them.
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
FORMATS = ("csv", "parquet")

#: COPY options per format (fixed text). Parquet: zstd, as the lake.
_COPY_OPTIONS = {
    "csv": "(format csv, header true)",
    "parquet": "(format parquet, compression zstd)",
}


class ExportError(Exception):
    """The export cannot run: unknown table or format, or a run filter the table cannot take."""


def export_table(
    warehouse_root: Path,
    table: str,
    out: Path,
    run_id: str | None = None,
    fmt: str | None = None,
) -> int:
    """Write ``table`` (a mart, model, seed or lake view) to ``out``; return the rows written.

    Args:
        warehouse_root: the warehouse folder.
        table: a table or view of the warehouse (``information_schema.tables``),
            matched exactly, else case-insensitively.
        out: the file to write. Written to a temporary file in the same
            folder and renamed into place, so readers see the old file or
            the whole new one.
        run_id: keep only this run's rows (the table needs a ``run_id`` column).
        fmt: ``csv`` (header row; NULL is an empty field) or ``parquet``;
            default from the suffix of ``out`` (``.csv``, ``.parquet``, ``.pq``).

    Raises:
        ExportError: unknown table or format, a run filter on a table
            without ``run_id``, or a query error; the message says what to do.
    """
    out = Path(out)
    chosen = _format(out, fmt)
    place = Warehouse(Path(warehouse_root).resolve())
    try:
        # Only the view asked for: each lake view reads every file footer of its table.
        con = connect(place, lake_views=[table.lower()])
    except duckdb.Error as exc:
        raise ExportError(f"cannot open {place.database}: {exc}") from exc
    try:
        name, quoted = _resolve_table(con, table, place)
        query = f"select * from {quoted}"  # noqa: S608 - a name found in information_schema
        params: list[str] = []
        if run_id is not None:
            if "run_id" not in _columns(con, quoted):
                raise ExportError(f"table {name!r} has no run_id column: export it "
                                       "without a run filter")
            _check_run(con, name, quoted, run_id)
            query += " where run_id = ?"
            params.append(run_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        try:
            row = con.execute(f"copy ({query}) to ? {_COPY_OPTIONS[chosen]}",
                              [*params, tmp]).fetchone()
            publish_mode(tmp)  # mkstemp made it 0600
            os.replace(tmp, out)
        except duckdb.Error as exc:
            raise ExportError(f"exporting {name!r} to {out} failed: {exc}") from exc
        finally:
            Path(tmp).unlink(missing_ok=True)
    finally:
        con.close()
    return int(row[0]) if row else 0


def _format(out: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    chosen = SUFFIXES.get(out.suffix.lower())
    if chosen is None:
        raise ExportError(f"cannot tell the format from {out.name!r}: name the file "
                               f"*.csv or *.parquet, or pass a format ({', '.join(FORMATS)})")
    return chosen


def _resolve_table(con: duckdb.DuckDBPyConnection, table: str,
                   place: Warehouse) -> tuple[str, str]:
    """``(name, quoted reference)`` of the table, or an error listing what exists."""
    found = resolve_table(con, table)
    if found is not None:
        return found
    names = table_names(con)
    marts = [name for name in names if name.startswith(("fct_", "dim_"))]
    raw = lake_tables(place)
    if marts:
        shown = "marts: " + ", ".join(marts) + ("; raw tables: " + ", ".join(raw) if raw else "")
    else:
        shown = "tables: " + (", ".join(sorted(set(names) | set(raw)))
                              or "none (run `tracehouse build`)")
    raise ExportError(f"no table {table!r} in {place.root}; {shown}")


def _check_run(con: duckdb.DuckDBPyConnection, name: str, quoted: str, run_id: str) -> None:
    """Raise unless the table holds rows of ``run_id``; the error lists the runs it holds."""
    runs = [row[0] for row in con.execute(
        f"select distinct run_id from {quoted} where run_id is not null"  # noqa: S608
        " order by run_id").fetchall()]
    if run_id in runs:
        return
    shown = ", ".join(runs) if runs else "none (the table is empty)"
    raise ExportError(f"no run {run_id!r} in {name}; runs: {shown}")


def _columns(con: duckdb.DuckDBPyConnection, quoted: str) -> set[str]:
    cursor = con.execute(f"select * from {quoted} limit 0")  # noqa: S608 - catalog name
    return {column[0] for column in cursor.description}
