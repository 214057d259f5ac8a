"""Ad-hoc SQL on a warehouse: ``tracehouse sql "QUERY" [--format table|csv|json]``.

:func:`run_sql` opens the warehouse read-only with its raw lake tables as
views (:mod:`.lake_connection`), refuses statements that would change it or
write files (:mod:`.read_only`), runs the query and writes the last
statement's result (:mod:`.result_formats`); every failure is one
``error:`` line on stderr and an exit code, never a traceback.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.schema import LAKE_TABLES
from tracehouse.query.lake_connection import connect, referenced_lake_tables
from tracehouse.query.read_only import QueryError, check_query
from tracehouse.query.result_formats import FORMATS, write_csv, write_json, write_table

#: DuckDB's message for a table or view that does not exist.
_UNKNOWN_TABLE = re.compile(r"Table with name (?P<name>.+?) does not exist")

_FETCH_BATCH = 10_000


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


def _fetch_batches(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple[Any, ...]]]:
    while True:
        rows = cursor.fetchmany(_FETCH_BATCH)
        if not rows:
            return
        yield rows
