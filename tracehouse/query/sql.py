"""Ad-hoc SQL on a warehouse: ``tracehouse sql "QUERY" [--format table|csv|json]``.

Queries run on ``<warehouse>/tracehouse.duckdb`` opened read-only, so they
can never change the warehouse; before the first ``tracehouse build`` there
is no database yet and they run on an in-memory DuckDB instead.

Why the raw tables are views made here, in the reading connection: a user
learns the lake's names (``slices``, ``traces``, ``ingest_errors``, … with
its columns ``ts``, ``dur``) from ingest's messages and the README, and
those names must keep working after ``tracehouse build``. So every
connection opened by :func:`connect` gets one temporary view per lake
table, over its Parquet files, holding only committed traces (as the
staging views do), whether or not the database is built. The views live in
the connection (DuckDB's ``temp`` catalog), never in the database file, so
they need no write access and never collide with dbt's models.

Why file access is limited: the database is read-only, but DuckDB's
``copy … to``, ``read_csv('/etc/passwd')`` or ``attach`` would still reach
any file the user can. :func:`connect` with ``restrict_files=True`` (what
``tracehouse sql`` does unless ``--allow-files``) lets the connection read
only the warehouse's lake, locks that setting, and :func:`run_sql` refuses
statements that write files (``copy``, ``export``), since the lake is
readable and must not be writable through SQL.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import duckdb
from sqlglot import exp

from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES

#: Output formats of :func:`run_sql`.
FORMATS = ("table", "csv", "json")

#: Widest cell of the ``table`` format, in characters; longer values are cut
#: in the middle (``head…tail``: kernel names differ at both ends, e.g. the
#: template arguments and the functor), unless ``wide``. csv and json always
#: carry whole values.
MAX_CELL_WIDTH = 60

#: Statement types that write files; refused unless files are allowed.
#: (``copy … from`` is refused too: it can only fill a temporary table.)
FILE_WRITING_STATEMENTS = frozenset({
    duckdb.StatementType.COPY,
    duckdb.StatementType.EXPORT,
    duckdb.StatementType.COPY_DATABASE,
})

#: Statement types that change tables or views: refused, since `tracehouse sql` is
#: read-only (dropping a raw view only hid it in that connection, yet said "Success").
#: With ``--allow-files`` the user takes files, and what they attach, into their hands.
CATALOG_CHANGING_STATEMENTS = frozenset({
    duckdb.StatementType.CREATE,
    duckdb.StatementType.DROP,
    duckdb.StatementType.ALTER,
    duckdb.StatementType.INSERT,
    duckdb.StatementType.UPDATE,
    duckdb.StatementType.DELETE,
    duckdb.StatementType.MERGE_INTO,
})
#: DuckDB's message for a table or view that does not exist.
_UNKNOWN_TABLE = re.compile(r"Table with name (?P<name>.+?) does not exist")

_FETCH_BATCH = 10_000


class QueryError(Exception):
    """A query that cannot run as given: empty, or writing files without ``--allow-files``."""


def run_sql(
    query: str,
    warehouse: Path,
    fmt: str = "table",
    out: TextIO | None = None,
    *,
    wide: bool = False,
    allow_files: bool = False,
) -> int:
    """Run ``query`` on the warehouse and write the result to ``out``.

    Args:
        query: SQL (DuckDB dialect); with several statements, the last one's
            result is written.
        warehouse: the warehouse folder.
        fmt: ``table`` (aligned text, wide cells cut in the middle, line
            breaks and tabs shown as ``\\n`` and ``\\t``), ``csv`` (header
            row, RFC 4180 quoting) or ``json`` (one array of objects;
            integers stay integers, other non-JSON types become strings).
        out: where the result goes; defaults to ``sys.stdout``.
        wide: ``table`` format only: never cut a cell.
        allow_files: let the query read and write any file the user can
            (``read_csv``, ``copy … to``, ``attach``); by default it can
            read only the warehouse's lake and database.

    Returns:
        0 on success, 1 when the query fails or the database cannot be
        opened (the reason goes to stderr), 2 for an unknown format, an
        empty query, an unknown table, or a statement that would write
        files or change tables and views (without ``allow_files``).
    """
    out = sys.stdout if out is None else out
    if fmt not in FORMATS:
        print(f"error: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", file=sys.stderr)
        return 2

    place = Warehouse(Path(warehouse).resolve())
    try:
        con = connect(place, restrict_files=not allow_files,
                      lake_views=referenced_lake_tables(query))
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
            check_query(con, query, allow_files=allow_files)
        except QueryError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except duckdb.Error as exc:  # a syntax error, found while splitting statements
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        try:
            cursor = con.execute(query)
        except duckdb.PermissionException as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("hint: `tracehouse sql` reads only the warehouse; pass --allow-files to "
                  "read or write other files", file=sys.stderr)
            return 1
        except duckdb.CatalogException as exc:
            unknown = _UNKNOWN_TABLE.search(str(exc))
            if unknown is None or unknown.group("name") in LAKE_TABLES:
                # Another catalog error, or a raw table the lake does not hold yet
                # (nothing ingested: connect() said so): not a typo.
                print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
            print(f"error: unknown table {unknown.group('name')} ({str(exc).splitlines()[0]})"
                  "; `tracehouse sql \"show tables\"` lists the tables and views",
                  file=sys.stderr)
            return 2
        except duckdb.Error as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        if cursor is None or cursor.description is None:  # a statement without a result
            return 0
        columns = [column[0] for column in cursor.description]
        batches = _fetch_batches(cursor)
        try:
            if fmt == "table":
                write_table(columns, batches, out, wide=wide)
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


def check_query(con: duckdb.DuckDBPyConnection, query: str, *, allow_files: bool) -> None:
    """Refuse a query with no statement, or one that writes files or changes tables and
    views when files are not allowed.

    Raises:
        QueryError: the query is empty (only blanks, comments or ``;``) or
            holds ``copy``/``export``, ``create``/``drop``/``alter``/``insert``/
            ``update``/``delete`` without ``allow_files``.
        duckdb.ParserException: the query does not parse.
    """
    statements = con.extract_statements(query)
    if not statements:
        raise QueryError("the query is empty (no SQL statement in it); e.g. "
                         "tracehouse sql \"select * from traces\"")
    if allow_files:
        return
    for statement in statements:
        if statement.type in CATALOG_CHANGING_STATEMENTS:
            raise QueryError(
                f"`tracehouse sql` is read-only: a {statement.type.name.lower()} statement "
                "would change the warehouse's tables or views, which only `tracehouse "
                "ingest` and `tracehouse build` do; query them with select (a with clause "
                "for intermediate results)")
        if statement.type in FILE_WRITING_STATEMENTS:
            raise QueryError(
                f"`tracehouse sql` does not write files ({statement.type.name.lower()} "
                "statement); use `tracehouse export table TABLE --out FILE`, or pass "
                "--allow-files")


def connect(
    place: Warehouse,
    *,
    restrict_files: bool = False,
    lake_views: Iterable[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse database read-only (in memory if it is not built yet), with raw views.

    The lake tables named in ``lake_views`` (default: every one on disk)
    become temporary views of the same name and columns (``slices``,
    ``traces``, ``ingest_errors``, …, see :func:`add_lake_views`), so the
    same names work before and after a build; callers that know which tables
    a query names pass only those (:func:`referenced_lake_tables`), because
    each view reads the footer of every Parquet file of its table when it is
    made. With ``restrict_files`` the connection can then read only the
    warehouse's lake (see :func:`restrict_file_access`). Before the build, a
    note on stderr says that only the raw tables are there.
    """
    built = place.database.is_file()
    con = duckdb.connect(str(place.database), read_only=True) if built else duckdb.connect()
    present = lake_tables(place)
    try:
        add_lake_views(con, place, present if lake_views is None else lake_views)
        if restrict_files:
            restrict_file_access(con, place)
    except BaseException:
        con.close()
        raise
    if not present and not built:
        print(
            f"note: warehouse {place.root} has no database and no lake yet; load traces "
            f"with `tracehouse ingest PATH --warehouse {place.root}`",
            file=sys.stderr,
        )
    elif not built:
        print(
            f"note: {place.database} is not built yet (run `tracehouse build`); querying the "
            f"raw lake tables ({', '.join(present)}) in memory",
            file=sys.stderr,
        )
    return con


def lake_tables(place: Warehouse) -> list[str]:
    """The raw lake tables present on disk, in :data:`LAKE_TABLES` order."""
    return [table for table in LAKE_TABLES if place.table_dir(table).is_dir()]


def referenced_lake_tables(query: str) -> set[str]:
    """Lake table names that appear as words in ``query`` (a cheap superset of those it reads).

    A name inside a string literal or a column alias counts too; that only
    makes one view more than needed, never one fewer.
    """
    return {table for table in LAKE_TABLES
            if re.search(rf"\b{table}\b", query, flags=re.IGNORECASE)}


def add_lake_views(
    con: duckdb.DuckDBPyConnection, place: Warehouse, tables: Iterable[str]
) -> list[str]:
    """Create a temporary view for each of ``tables`` present in the lake; return their names.

    Each view reads ``lake/<table>/**/*.parquet`` by column name, exactly the
    lake's columns; per-trace tables keep only traces committed in
    ``traces`` (a trace interrupted mid-commit is invisible, as in staging),
    so asking for one of them makes the ``traces`` view too. Views that
    exist already are kept. The glob is a SQL string literal built by
    sqlglot (a warehouse path may hold quotes).
    """
    present = lake_tables(place)
    wanted = {table for table in tables if table in present}
    if wanted & set(TRACE_TABLES) and "traces" in present:
        wanted.add("traces")
    existing = {row[0] for row in con.execute(
        "select view_name from duckdb_views() where database_name = 'temp'").fetchall()}
    # ``traces`` first: the other per-trace views filter on it.
    for table in sorted(wanted - existing, key=lambda name: (name != "traces", name)):
        glob = exp.Literal.string(str(place.table_dir(table) / "**" / "*.parquet"))
        query = (
            f"select * from read_parquet({glob.sql(dialect='duckdb')},"
            " union_by_name = true, hive_partitioning = false)"
        )
        if table in TRACE_TABLES and table != "traces" and "traces" in wanted:
            query += " where trace_id in (select trace_id from temp.main.traces)"
        con.execute(f'create temp view "{table}" as {query}')  # noqa: S608
    return sorted(wanted)


def restrict_file_access(con: duckdb.DuckDBPyConnection, place: Warehouse) -> None:
    """Let ``con`` read files only under the warehouse's lake, and lock its settings.

    DuckDB checks ``allowed_directories`` whenever ``enable_external_access``
    is off; ``lock_configuration`` keeps a query from turning it back on.
    Extensions cannot be installed or loaded either.
    """
    con.execute("set allowed_directories = ?", [[str(place.lake) + "/"]])
    con.execute("set enable_external_access = false")
    con.execute("set lock_configuration = true")


def catalog_tables(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every table and view, as a query names it, mapped to its quoted SQL reference.

    Marts, staging views and the raw lake views live in the ``main`` schema
    and are named bare (``fct_kernels``, ``slices``); models dbt puts in
    other schemas (``intermediate``, ``seeds``) are named ``schema.table``,
    as a query must write them. The references are built from catalog
    names only, never from what a caller typed.
    """
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    tables: dict[str, str] = {}
    for schema, table in con.execute(
            "select table_schema, table_name from information_schema.tables"
            " order by table_catalog = 'temp' desc, table_schema, table_name").fetchall():
        if schema == "main":
            tables.setdefault(table, quote(table))
        else:
            tables.setdefault(f"{schema}.{table}", f"{quote(schema)}.{quote(table)}")
    return tables


def table_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every table and view a query can name (see :func:`catalog_tables`), sorted."""
    return sorted(catalog_tables(con))


def resolve_table(con: duckdb.DuckDBPyConnection, name: str) -> tuple[str, str] | None:
    """``(name as listed, quoted reference)`` for what a person typed, or None.

    Matched exactly, else case-insensitively, else by the bare name of a
    table in another schema when only one schema has it
    (``kernel_kind_patterns`` for ``seeds.kernel_kind_patterns``).
    """
    tables = catalog_tables(con)
    if name in tables:
        return name, tables[name]
    for candidates in (
        [key for key in tables if key.lower() == name.lower()],
        [key for key in tables if "." in key
         and key.split(".", 1)[1].lower() == name.lower()],
    ):
        if len(candidates) == 1:
            return candidates[0], tables[candidates[0]]
    return None


def _fetch_batches(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple[Any, ...]]]:
    while True:
        rows = cursor.fetchmany(_FETCH_BATCH)
        if not rows:
            return
        yield rows


# --------------------------------------------------------------------------- formats


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
