"""``tracehouse whatif``: argument parsing over :func:`tracehouse.query.whatif.whatif_rows`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_result_format,
    name,
    warehouse_parent,
)

__all__ = ["add_parser"]


def _scale(text: str):
    """argparse type for ``--scale``: a parsed Scale, or the parser's own mistake."""
    from tracehouse.query.whatif_scale import parse_scale

    try:
        return parse_scale(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(sub: Any) -> None:
    """Register ``tracehouse whatif`` on the main parser's subcommands."""
    whatif = sub.add_parser(
        "whatif",
        parents=[warehouse_parent()],
        help="replay a run with your own scaled durations, beside the standard scenarios",
        description=(
            "Replay a run's dependency graph with the durations of the ops you select scaled "
            "(e.g. --scale 'rank=6,kind=compute:0.5': rank 6's compute kernels twice as "
            "fast) and print the step it predicts beside the measured one, the replay as "
            "measured and the standard scenarios (fct_what_if). Selectors, all of which an op "
            "must meet: rank=N|A-B, stage=N|A-B, kind=compute|memory|communication|cpu, "
            "phase=NAME, name=REGEX (kernel name, case-insensitive), group=KIND (collective "
            "process-group kind: tp, dp, pp, ...); the factor after the last ':' multiplies "
            "their durations (a collective member's transfer after the last arrival, never "
            "its wait). Figures are means over the run's iterations; saved_ratio is saved / "
            "step over all of them. Reads the what-if models, which every tracehouse build "
            "makes unless given --vars '{whatif: false}'."
        ),
    )
    whatif.add_argument("--scale", type=_scale, action="append", default=[],
                        metavar="SELECTORS:FACTOR",
                        help="ops to scale and the factor (several: each alone, then "
                             "all of them as 'combined')")
    whatif.add_argument("--run", type=name, metavar="NAME",
                        help="one run (default: every run with what-if answers)")
    add_result_format(whatif, "table format: never cut long values")
    whatif.set_defaults(handler=run_whatif)


def run_whatif(args: argparse.Namespace) -> int:
    """Print the scenarios of the chosen runs; a warehouse without what-if tables is
    a clear error naming the build that makes them."""
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.query.result_formats import write_csv, write_json, write_table
    from tracehouse.query.whatif import COLUMNS, SelectionError, WhatifUnavailable, whatif_rows

    try:
        rows = whatif_rows(Warehouse.at(args.warehouse), args.scale, args.run)
    except WhatifUnavailable as error:
        print(f"tracehouse whatif: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except SelectionError as error:
        print(f"tracehouse whatif: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "csv":
        write_csv(COLUMNS, [rows], sys.stdout)
    elif args.format == "json":
        write_json(COLUMNS, [rows], sys.stdout)
    else:
        write_table(COLUMNS, [rows], sys.stdout, wide=args.wide)
    return EXIT_OK
