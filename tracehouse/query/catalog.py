"""The tables and views a connection can query, by the names a person types.

``tracehouse export table`` and the notebook take a table name from a
person; these find it in the catalog (marts bare, other schemas as
``schema.table``) and give back a quoted reference built from catalog
names only, never from what was typed.
"""

from __future__ import annotations

import duckdb


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
