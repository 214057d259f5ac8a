"""``tracehouse report``: argument parsing over :func:`tracehouse.reports.report.render_report`."""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE, name, path, warehouse_parent
from tracehouse.cli.last_build import lake_is_built

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse report`` on the main parser's subcommands."""
    report = sub.add_parser(
        "report",
        parents=[warehouse_parent()],
        help="render every chart and an index.html report from the marts",
        description=(
            "Render every chart family (PNG and SVG) and an index.html report for one run "
            "from the warehouse's marts. The report is swapped in atomically; when the marts "
            "have not changed since the last report it is left as it is (--force re-renders). "
            "Exit 1 when a chart family failed (the others are still rendered)."
        ),
    )
    report.add_argument("--run", type=name, metavar="NAME",
                        help="run to report (default: the only run, else the newest)")
    report.add_argument("--compare", type=name, metavar="NAME",
                        help="a second run to compare with, side by side")
    report.add_argument("--out", type=path, default=None, metavar="DIR",
                        help="report folder (default: <warehouse>/reports/<run>)")
    report.add_argument("--force", action="store_true",
                        help="re-render even when the marts have not changed")
    report.add_argument("-q", "--quiet", action="store_true",
                        help="no progress output, only failed chart families and where the "
                             "report is")
    report.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse report``."""
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.report import ReportError, render_report

    if not lake_is_built(args.warehouse, [args.run, args.compare]):
        return EXIT_USAGE
    warehouse = Warehouse.at(args.warehouse)
    try:
        result = render_report(warehouse.root, args.out, run_id=args.run,
                               compare_run_id=args.compare, force=args.force,
                               stream=io.StringIO() if args.quiet else sys.stderr)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.quiet:  # the progress lines were dropped: name the failures
        for failure in result.failures:
            print(f"error: chart family {failure.family} failed: {failure.error}",
                  file=sys.stderr)
    print(f"report: {result.index_html}", file=sys.stderr)
    return EXIT_FAILED if result.failures else EXIT_OK
