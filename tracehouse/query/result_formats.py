"""How a query's result is written: an aligned text table, CSV or JSON.

One job: turn DuckDB's Python values into text a person reads (the table,
cut in the middle where cells are wide) or a program reads (CSV by RFC
4180, JSON with integers kept exact). ``tracehouse sql``, ``compare``, the
viewer's CSV download and the Nsight views write through these.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

#: Output formats of :func:`tracehouse.query.sql.run_sql`.
FORMATS = ("table", "csv", "json")

#: Widest cell of the ``table`` format, in characters; longer values are cut
#: in the middle (``head…tail``: kernel names differ at both ends, e.g. the
#: template arguments and the functor), unless ``wide``. csv and json always
#: carry whole values.
MAX_CELL_WIDTH = 60

def write_table(
    columns: Sequence[str],
    batches: Iterable[list[tuple[Any, ...]]],
    out: TextIO,
    *,
    wide: bool = False,
) -> None:
    """Write rows as an aligned text table, numbers right-aligned, then a row count.

    Cells wider than :data:`MAX_CELL_WIDTH` are cut in the middle unless
    ``wide``; a column whose different values would look the same once cut
    is cut wider, until they look different. Reads every row before writing
    (column widths depend on all of them).
    """
    rows = [row for batch in batches for row in batch]
    texts = [[_cell(value) for value in row] for row in rows]
    limits = [None if wide else _distinct_width([row[index] for row in texts])
              for index in range(len(columns))]
    cells = [[clip(text, limit) for text, limit in zip(row, limits)] for row in texts]
    headers = [clip(_one_line(name), None if wide else MAX_CELL_WIDTH) for name in columns]
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
    """A value as a table cell, before clipping: NULL shown as NULL, on one line."""
    if value is None:
        return "NULL"
    return _one_line(_text(value))


def _distinct_width(texts: Sequence[str]) -> int:
    """The narrowest cut, from :data:`MAX_CELL_WIDTH` up, keeping different texts different."""
    longest = max((len(text) for text in texts), default=0)
    width = MAX_CELL_WIDTH
    distinct = len(set(texts))
    while width < longest and len({clip(text, width) for text in texts}) < distinct:
        width += MAX_CELL_WIDTH // 3
    return width


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def clip(text: str, width: int | None = MAX_CELL_WIDTH) -> str:
    """``text`` cut to ``width`` characters by an ellipsis in the middle (None: never cut).

    The middle, not the end: long kernel names share their start
    (``void at::native::vectorized_elementwise_kernel<4, …``) and differ in
    what follows, so the tail is kept too and different names stay different.
    """
    if width is None or len(text) <= width:
        return text
    head = (width - 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + text[len(text) - tail:]
