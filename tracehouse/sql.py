"""Ad-hoc SQL on a warehouse: ``tracehouse sql "QUERY" [--format table|csv|json]``.

Queries run on ``<warehouse>/tracehouse.duckdb`` opened read-only, so they
can never change the warehouse. Before the first ``tracehouse build`` there
is no database yet; queries then run on an in-memory DuckDB where each lake
table is a view of the same name over its Parquet files (``slices``,
``traces``, …, with the lake's own column names), holding only committed
traces as the staging views do.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import duckdb

from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES
from tracehouse.warehouse import Warehouse

#: Output formats of :func:`run_sql`.
FORMATS = ("table", "csv", "json")

#: Widest cell of the ``table`` format, in characters; longer values are cut
#: and end in an ellipsis. csv and json always carry whole values.
MAX_CELL_WIDTH = 60

_FETCH_BATCH = 10_000


def run_sql(
    query: str,
    warehouse: Path,
    fmt: str = "table",
    out: TextIO | None = None,
) -> int:
    """Run ``query`` on the warehouse and write the result to ``out``.

    Args:
        query: SQL (DuckDB dialect); with several statements, the last one's
            result is written.
        warehouse: the warehouse folder.
        fmt: ``table`` (aligned text, wide cells cut, line breaks and tabs
            shown as ``\\n`` and ``\\t``), ``csv`` (header row, RFC 4180
            quoting) or ``json`` (one array of objects; integers stay
            integers, other non-JSON types become strings).
        out: where the result goes; defaults to ``sys.stdout``.

    Returns:
        0 on success, 1 when the query fails or the database cannot be
        opened (the reason goes to stderr), 2 for an unknown format.
    """
    out = sys.stdout if out is None else out
    if fmt not in FORMATS:
        print(f"error: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", file=sys.stderr)
        return 2

    place = Warehouse(Path(warehouse).resolve())
    try:
        con = connect(place)
    except duckdb.Error as exc:
        print(f"error: cannot open {place.database}: {exc}", file=sys.stderr)
        if "lock" in str(exc).lower():
            print(
                "hint: another process is writing the warehouse (tracehouse build or "
                "ingest?); retry when it is done",
                file=sys.stderr,
            )
        return 1

    try:
        try:
            cursor = con.execute(query)
        except duckdb.Error as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        if cursor.description is None:  # a statement without a result
            return 0
        columns = [column[0] for column in cursor.description]
        batches = _fetch_batches(cursor)
        try:
            if fmt == "table":
                write_table(columns, batches, out)
            elif fmt == "csv":
                write_csv(columns, batches, out)
            else:
                write_json(columns, batches, out)
        except duckdb.Error as exc:  # errors can surface while fetching
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    finally:
        con.close()
    return 0


def connect(place: Warehouse) -> duckdb.DuckDBPyConnection:
    """Open the warehouse database read-only, or the lake in memory if it is not built yet.

    The fallback connection has one view per lake table present on disk;
    per-trace tables keep only traces committed in ``traces``. A note on
    stderr says which one was opened.
    """
    if place.database.is_file():
        return duckdb.connect(str(place.database), read_only=True)

    con = duckdb.connect(":memory:")
    present = [table for table in LAKE_TABLES if place.table_dir(table).is_dir()]
    if not present:
        print(
            f"note: warehouse {place.root} has no database and no lake yet; load traces "
            f"with `tracehouse ingest PATH --warehouse {place.root}`",
            file=sys.stderr,
        )
        return con
    relations = {table: _read_lake_table(con, place, table) for table in present}
    for table, relation in relations.items():
        if table in TRACE_TABLES and table != "traces" and "traces" in relations:
            committed = relations["traces"].project("trace_id")
            relation = relation.join(committed, "trace_id", how="semi")
        relation.create_view(table, replace=True)
    print(
        f"note: {place.database} is not built yet (run `tracehouse build`); querying the "
        f"raw lake tables ({', '.join(present)}) in memory",
        file=sys.stderr,
    )
    return con


def _read_lake_table(
    con: duckdb.DuckDBPyConnection, place: Warehouse, table: str
) -> duckdb.DuckDBPyRelation:
    glob = str(place.table_dir(table) / "**" / "*.parquet")
    return con.read_parquet(glob, union_by_name=True, hive_partitioning=False)


def _fetch_batches(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple[Any, ...]]]:
    while True:
        rows = cursor.fetchmany(_FETCH_BATCH)
        if not rows:
            return
        yield rows


# --------------------------------------------------------------------------- formats


def write_table(
    columns: Sequence[str], batches: Iterable[list[tuple[Any, ...]]], out: TextIO
) -> None:
    """Write rows as an aligned text table, numbers right-aligned, then a row count.

    Reads every row before writing (column widths depend on all of them).
    """
    rows = [row for batch in batches for row in batch]
    cells = [[_cell(value) for value in row] for row in rows]
    headers = [_clip(_one_line(name)) for name in columns]
    widths = [len(header) for header in headers]
    for row in cells:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    numeric = [
        bool(rows) and all(_is_number(row[index]) or row[index] is None for row in rows)
        for index in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return " | ".join(parts).rstrip()

    out.write(line(headers) + "\n")
    out.write("-+-".join("-" * width for width in widths) + "\n")
    for row in cells:
        out.write(line(row) + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


def write_csv(
    columns: Sequence[str], batches: Iterable[list[tuple[Any, ...]]], out: TextIO
) -> None:
    """Write a header row and the rows as CSV; NULL is an empty field.

    Fields holding the delimiter, quotes or line breaks are quoted, quotes
    doubled (RFC 4180); lists and structs are written as JSON.
    """
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for batch in batches:
        writer.writerows([_text(value) for value in row] for row in batch)


def write_json(
    columns: Sequence[str], batches: Iterable[list[tuple[Any, ...]]], out: TextIO
) -> None:
    """Write the rows as one JSON array of objects, one object per line.

    Integers stay integers (also beyond 2**53), non-finite floats become
    null, decimals become numbers, and other types (timestamps, intervals,
    UUIDs, bytes) become strings.
    """
    first = True
    out.write("[")
    for batch in batches:
        for row in batch:
            record = {name: _json_value(value) for name, value in zip(columns, row, strict=True)}
            out.write("\n" if first else ",\n")
            out.write(json.dumps(record, ensure_ascii=False, allow_nan=False))
            first = False
    out.write("\n]\n" if not first else "]\n")


# --------------------------------------------------------------------------- values


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def _json_value(value: Any) -> Any:
    """Turn a DuckDB Python value into something ``json.dumps`` writes faithfully."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {_text(key): _json_value(item) for key, item in value.items()}
    return _text(value)


def _text(value: Any) -> str:
    """A value as CSV text: NULL is empty, nested values are JSON, the rest str()."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(_json_value(value), ensure_ascii=False)
    return str(value)  # numbers, decimals, intervals, UUIDs


def _cell(value: Any) -> str:
    """A value as a table cell: NULL shown as NULL, on one line, clipped."""
    if value is None:
        return "NULL"
    return _clip(_one_line(_text(value)))


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _clip(text: str) -> str:
    if len(text) <= MAX_CELL_WIDTH:
        return text
    return text[: MAX_CELL_WIDTH - 1] + "…"
