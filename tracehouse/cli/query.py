"""``tracehouse sql`` and ``tracehouse compare``: the warehouse's tables and marts, printed.

Thin argument parsing over :func:`tracehouse.query.sql.run_sql` and
:func:`tracehouse.query.compare_runs.compare_runs`; both read the last
build, so both say first when the lake is newer (:mod:`.last_build`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_USAGE, add_result_format, name, warehouse_parent
from tracehouse.cli.last_build import lake_is_built

__all__ = ["add_parsers"]


def add_parsers(sub: Any) -> None:
    """Register ``tracehouse sql`` and ``tracehouse compare`` on the main parser's
    subcommands."""
    sql = sub.add_parser(
        "sql",
        parents=[warehouse_parent()],
        help="run ad-hoc SQL on the warehouse",
        description=(
            "Run one SQL query on the warehouse (read-only) and print the result. The raw "
            "lake tables (slices, traces, ingest_errors, ...) keep their names and columns "
            "before and after `tracehouse build`; the marts (fct_*, dim_*) appear with the "
            "build. The query reads only the warehouse unless --allow-files."
        ),
    )
    sql.add_argument("query", metavar="QUERY",
                     help="SQL (DuckDB dialect); - reads it from standard input")
    add_result_format(sql, "table format: never cut long values (default: cut in the middle)")
    sql.add_argument("--allow-files", action="store_true",
                     help="let the query read and write any file (read_csv, copy ... to, "
                          "attach, and create or drop what it attaches); by default it reads "
                          "only the warehouse and changes nothing (exit 2)")
    sql.set_defaults(handler=run_sql)

    compare = sub.add_parser(
        "compare",
        parents=[warehouse_parent()],
        help="two runs' iteration summaries side by side, with the differences",
        description=(
            "Print fct_iteration_summary of two runs side by side: step time (the slowest "
            "rank's step), its difference in ms and %, exposed communication share, "
            "pipeline bubble, slowest rank, straggler and worst collective skew. "
            "Iterations are paired by their order within each run; the last row compares "
            "the means. An unknown run is a usage error (exit 2)."
        ),
    )
    compare.add_argument("run_a", type=name, metavar="RUN_A", help="the baseline run")
    compare.add_argument("run_b", type=name, metavar="RUN_B", help="the run compared with it")
    add_result_format(compare, "table format: never cut long values")
    compare.set_defaults(handler=run_compare)


def run_sql(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse sql``."""
    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.query.sql import run_sql as run_query

    lake_is_built(args.warehouse)
    query = args.query
    if query == "-":
        try:
            query = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            print(f"error: standard input: the query is not UTF-8 ({exc.reason} at byte "
                  f"{exc.start})", file=sys.stderr)
            return EXIT_USAGE
    return run_query(query, resolve_warehouse(args.warehouse), fmt=args.format,
                     wide=args.wide, allow_files=args.allow_files)


def run_compare(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse compare``."""
    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.query.compare_runs import compare_runs

    if not lake_is_built(args.warehouse, [args.run_a, args.run_b]):
        return EXIT_USAGE
    return compare_runs(args.run_a, args.run_b, resolve_warehouse(args.warehouse),
                        fmt=args.format, wide=args.wide)
