"""A read-only connection to a warehouse, its raw lake tables as views.

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
only the warehouse's lake and locks that setting
(:func:`restrict_file_access`); :mod:`.read_only` refuses the statements
that write files.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

import duckdb
from sqlglot import exp

from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES


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
