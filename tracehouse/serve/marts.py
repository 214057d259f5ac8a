"""The viewer's one way into the warehouse: read-only cursors on the published marts.

Why these rules (the same as ``tracehouse sql``'s, see :func:`open_published`):
the database is opened read-only and the connection may read no file
outside the warehouse's lake (``restrict_files``), with its configuration
locked, so nothing a request asks for can write a file or reach one; and
the server holds no SQL endpoint, only fixed queries with bound parameters.

Why a build beside it is neither blocked nor seen half-done: ``tracehouse
build`` writes a copy of the database and renames it over the published
file (:mod:`tracehouse.core.publish`). A connection opened before the
rename keeps reading the old file whole. Before each request the reader
compares the published file's identity (inode, size, mtime) with the one it
opened and, when a build has published since, opens the new file; a request
already running finishes on the old one. So a page shows one build's marts,
never a mix, and the next click shows the new build.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from tracehouse.core.warehouse import DATABASE_FILE, Warehouse
from tracehouse.query.lake_connection import restrict_file_access


class WarehouseNotReady(Exception):
    """No published database, or none with marts: the message says which command builds it."""


#: The catalog name the marts' views are written with: the database file's stem.
CATALOG = Path(DATABASE_FILE).stem
#: The marts a run must have one of for the viewer to show it.
REQUIRED_ANY = ("fct_rank_iterations", "fct_run_summary")


def _identity(path: Path) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class MartReader:
    """Read-only cursors on ``<warehouse>/tracehouse.duckdb``, reopened after each publish.

    Thread-safe: each request takes its own cursor (a DuckDB connection of
    its own on the shared database instance) with :meth:`cursor`.
    """

    def __init__(self, warehouse: Path) -> None:
        self.place = Warehouse(Path(warehouse).resolve())
        # Where DuckDB may spill (a selection cached for the timeline, a big sort): a private
        # folder outside the warehouse, removed on close, so the warehouse is never written.
        self._spill = Path(tempfile.mkdtemp(prefix="tracehouse-serve-"))
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened: tuple[int, int, int] | None = None
        try:
            self.check()
        except BaseException:
            self.close()
            raise

    def check(self) -> None:
        """Open the database now (or raise :class:`WarehouseNotReady` saying what to run)."""
        with self.cursor() as cur:
            if tables(cur).isdisjoint(REQUIRED_ANY):
                raise WarehouseNotReady(
                    f"the warehouse at {self.place.root} has no marts yet (none of "
                    f"{', '.join(REQUIRED_ANY)}); build them: tracehouse build "
                    f"--warehouse {self.place.root}")

    def _connection(self) -> duckdb.DuckDBPyConnection:
        database = self.place.database
        try:
            now = _identity(database)
        except FileNotFoundError:
            raise WarehouseNotReady(
                f"no warehouse database at {database}; load traces and build the marts "
                f"first: tracehouse ingest PATH --warehouse {self.place.root} && "
                f"tracehouse build --warehouse {self.place.root}") from None
        with self._lock:
            if self._con is None or now != self._opened:
                # The old connection is dropped, not closed: requests running on
                # cursors of it finish on the file they started with.
                self._con = open_published(self.place,
                                           Path(tempfile.mkdtemp(dir=self._spill)))
                self._opened = now
            return self._con

    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own on the current published database, closed afterwards."""
        cur = self._connection().cursor()
        _TABLES[id(cur)] = None  # :func:`tables` may remember its answer for this request
        try:
            cur.execute(f"use {CATALOG}")  # a cursor starts in the in-memory catalog
            yield cur
        finally:
            _TABLES.pop(id(cur), None)
            cur.close()

    def close(self) -> None:
        """Close the connection and remove the spill folder (the server is stopping)."""
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None
        shutil.rmtree(self._spill, ignore_errors=True)


def open_published(place: Warehouse, spill: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection on the published database, with ``tracehouse sql``'s file rules.

    Why not ``duckdb.connect(path, read_only=True)`` (what
    :func:`tracehouse.query.lake_connection.connect` does, once per process):
    DuckDB keeps one database instance per path in a
    process and hands it to every later connect of that path while any
    connection to it lives, so a server that outlives a build would keep
    reading the replaced file. An in-memory instance of its own per published
    file, with the file attached read-only under its catalog name (the name
    dbt wrote into the marts' views), reads exactly that file; then
    :func:`~tracehouse.query.lake_connection.restrict_file_access` locks it to the lake,
    as ``tracehouse sql`` does. Spills go to ``spill``, a private folder outside
    the warehouse (DuckDB would put them beside the file, in the warehouse).
    """
    database = place.database
    con = duckdb.connect()
    try:
        target = exp.Literal.string(str(database)).sql(dialect="duckdb")
        con.execute(f"attach {target} as {CATALOG} (read_only)")
        con.execute(f"use {CATALOG}")
        con.execute("set temp_directory = ?", [str(spill)])
        restrict_file_access(con, place)
    except BaseException:
        con.close()
        raise
    return con


@dataclass(frozen=True)
class Selection:
    """The mart rows a view shows, as a query: what its CSV/Parquet export writes.

    ``name`` names the file; ``sql`` is fixed text with every value in ``params``,
    and ``order`` the ``order by`` list the view shows the rows in.
    """

    name: str
    sql: str
    params: dict[str, Any]
    order: str = ""

    @property
    def ordered(self) -> str:
        """The query with its order (for the export; a view may page it)."""
        return f"{self.sql} order by {self.order}" if self.order else self.sql


def rows(cur: duckdb.DuckDBPyConnection, sql: str,
         params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
    """The rows of ``sql`` (bound ``params``) as dicts keyed by column name."""
    bound = dict(params) if isinstance(params, Mapping) else list(params)
    result = cur.execute(sql, bound)
    names = [column[0] for column in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def bound(sql: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The named parameters ``sql`` uses (``$name``), from ``values``: DuckDB refuses a
    statement given parameters it does not name."""
    return {name: value for name, value in values.items()
            if re.search(rf"\${re.escape(name)}\b", sql)}


def first_row(cur: duckdb.DuckDBPyConnection, sql: str,
              params: Sequence[Any] | Mapping[str, Any] = ()) -> tuple[Any, ...] | None:
    """The first row of ``sql``, or None; the result is read to its end (DuckDB keeps a
    cursor busy until then, and the next query on it would fail)."""
    bound = dict(params) if isinstance(params, Mapping) else list(params)
    found = cur.execute(sql, bound).fetchall()
    return found[0] if found else None


#: What :func:`tables` found, per cursor of :meth:`MartReader.cursor` open now (None until
#: asked): a timeline answer asked it 6-9 times, 1.3-1.6 CPU ms each, and one request sees
#: one published database. Other cursors are asked every time.
_TABLES: dict[int, frozenset[str] | None] = {}


def tables(cur: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The tables and views of the ``main`` schema (where the marts are)."""
    known = _TABLES.get(id(cur))
    if known is not None:
        return known
    found = frozenset(row[0] for row in cur.execute(
        "select table_name from information_schema.tables where table_schema = 'main'"
    ).fetchall())
    if id(cur) in _TABLES:
        _TABLES[id(cur)] = found
    return found


def columns(cur: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """The columns of ``table`` in order ([] when there is no such table)."""
    return [row[0] for row in cur.execute(
        "select column_name from information_schema.columns where table_schema = 'main' "
        "and table_name = ? order by ordinal_position", [table]).fetchall()]
