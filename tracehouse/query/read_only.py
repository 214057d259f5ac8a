"""Which statements ``tracehouse sql`` refuses: those that change the warehouse or write files.

The database is opened read-only, and the raw lake tables are views of the
connection; still, a ``drop`` of such a view would "succeed" (hiding it in
that connection) and ``copy … to`` would write any file the user can. So
every statement of a query is checked before it runs (:func:`check_query`),
unless the user allows files and takes them into their own hands.
"""

from __future__ import annotations

import duckdb

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


class QueryError(Exception):
    """A query that cannot run as given: empty, or writing files without ``--allow-files``."""


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
