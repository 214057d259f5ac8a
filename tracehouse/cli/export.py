"""``tracehouse export perfetto|table``: argument parsing over the exports in
:mod:`tracehouse.reports` (the merged Perfetto timeline, a table as CSV or Parquet)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import (
    EXIT_OK,
    EXIT_USAGE,
    name,
    path,
    rank_list,
    warehouse_parent,
)
from tracehouse.cli.last_build import lake_is_built

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse export`` and its two kinds on the main parser's subcommands."""
    export = sub.add_parser(
        "export",
        help="export a merged Perfetto timeline, or any table as CSV/Parquet",
        description=(
            "`export perfetto`: one merged timeline of many ranks for ui.perfetto.dev. "
            "`export table`: any mart or table as CSV or Parquet."
        ),
    )
    export_sub = export.add_subparsers(dest="export_kind", metavar="WHAT")
    export_sub.required = True
    perfetto = export_sub.add_parser(
        "perfetto",
        parents=[warehouse_parent()],
        help="merged multi-rank timeline (Perfetto protobuf, or Chrome JSON)",
        description=(
            "Write one timeline holding many ranks: each rank a process named with its "
            "parallel coordinates, its CPU steps and GPU streams, kernels coloured by kind "
            "and named with phase, microbatch and group. Choose ranks with --ranks, "
            "--pp-group or --replica (default: every rank)."
        ),
    )
    perfetto.add_argument("--run", type=name, required=True, metavar="NAME",
                          help="run to export")
    select = perfetto.add_mutually_exclusive_group()
    select.add_argument("--ranks", type=rank_list, default=None, metavar="LIST",
                        help="ranks, e.g. 0,1,4-7")
    select.add_argument("--pp-group", type=int, default=None, metavar="N",
                        help="the ranks of pipeline group N (dim_ranks.pp_group_index)")
    select.add_argument("--replica", type=int, default=None, metavar="N",
                        help="the ranks of model replica N (dim_ranks.model_replica)")
    perfetto.add_argument("--format", choices=("proto", "json"), default="proto",
                          help="Perfetto protobuf (default) or Chrome trace JSON")
    perfetto.add_argument("--out", type=path, required=True, metavar="FILE")
    perfetto.set_defaults(handler=run_perfetto)
    table = export_sub.add_parser(
        "table",
        parents=[warehouse_parent()],
        help="a mart or table as CSV or Parquet",
        description="Write one table of the warehouse (e.g. fct_rank_iterations) to FILE; "
                    "the format comes from --format, else FILE's suffix.",
    )
    table.add_argument("table", type=name, metavar="TABLE")
    table.add_argument("--run", type=name, metavar="NAME", help="only this run's rows")
    table.add_argument("--format", choices=("csv", "parquet"), default=None)
    table.add_argument("--out", type=path, required=True, metavar="FILE")
    table.set_defaults(handler=run_table)


def run_perfetto(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse export perfetto``."""
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.perfetto import ExportError, export_perfetto

    if not lake_is_built(args.warehouse, [args.run]):
        return EXIT_USAGE
    warehouse = Warehouse.at(args.warehouse)
    try:
        result = export_perfetto(warehouse.root, args.run, args.out, ranks=args.ranks,
                                 pp_group=args.pp_group, replica=args.replica,
                                 fmt=args.format)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {result.summary()} to {args.out}; open it in https://ui.perfetto.dev",
          file=sys.stderr)
    return EXIT_OK


def run_table(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse export table``."""
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.table_export import ExportError, export_table

    if not lake_is_built(args.warehouse, [args.run]):
        return EXIT_USAGE
    warehouse = Warehouse.at(args.warehouse)
    try:
        rows = export_table(warehouse.root, args.table, args.out, run_id=args.run,
                            fmt=args.format)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {rows:,} row(s) of {args.table} to {args.out}", file=sys.stderr)
    return EXIT_OK
