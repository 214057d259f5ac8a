"""``tracehouse nsys info|summary|overlap|nccl|iters|tree FILE``: argument parsing over
:func:`tracehouse.nsys_views.run.nsys_view` (nsys-ai's views, answered by the marts)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tracehouse.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE, warehouse_dir
from tracehouse.nsys_views import VIEWS

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse nsys`` on the main parser's subcommands."""
    parser = sub.add_parser(
        "nsys",
        help="Nsight Systems views (as nsys-ai shows them), answered by the marts",
        description="Ingest an Nsight Systems export (.sqlite, or .nsys-rep with nsys on PATH) "
                    "into --warehouse (else a temporary warehouse), build the marts it needs and "
                    "print one view of them. A file the warehouse already holds (same path, "
                    "else same content) is not loaded again, and the marts are not rebuilt "
                    "when nothing changed.")
    parser.add_argument("--warehouse", type=warehouse_dir, metavar="DIR",
                        help="warehouse to load the file into and keep (default: a temporary "
                             "warehouse, removed afterwards; $TRACEHOUSE_WAREHOUSE is not "
                             "used)")
    parser.add_argument("view", choices=VIEWS)
    parser.add_argument("file", type=Path, metavar="FILE")
    parser.add_argument("--gpu", type=int, metavar="N", help="CUDA device id (default: all)")
    parser.add_argument("--trim", type=float, nargs=2, metavar=("START", "END"),
                        help="capture-clock seconds; only kernels wholly inside count "
                             "(uses a temporary warehouse)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse nsys``."""
    from tracehouse.nsys_views import NsysUsageError, NsysViewError
    from tracehouse.nsys_views.run import nsys_view
    from tracehouse.nsys_views.text import format_table

    if args.trim is not None and not args.trim[0] < args.trim[1]:
        print("error: --trim START END needs START < END (seconds)", file=sys.stderr)
        return EXIT_USAGE
    if not args.file.is_file():
        print(f"error: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = nsys_view(args.view, args.file, warehouse=args.warehouse, gpu=args.gpu,
                           trim=tuple(args.trim) if args.trim else None)
    except NsysUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NsysViewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print(format_table(args.view, result))
    return EXIT_OK
