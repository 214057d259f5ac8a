"""``tracehouse demo``: argument parsing over :func:`tracehouse.cli.demo_run.run_demo`.

The demo itself (simulate, ingest, build, summarise) is in :mod:`.demo_run`,
imported only when the command runs: it imports the simulator, which every
other command would otherwise pay for at start-up.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_FAILED, EXIT_OK, path, warehouse_parent

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse demo`` on the main parser's subcommands."""
    demo = sub.add_parser(
        "demo",
        parents=[warehouse_parent()],
        help="simulate a small run, load it, build the warehouse, print headline numbers",
        description=(
            "Simulate a 16-rank Megatron run (TP2 x PP4 x DP2, interleaved, 2 iterations, "
            "one straggler), ingest it, run dbt build, and print per-rank GPU time and where "
            "the warehouse is."
        ),
    )
    demo.add_argument("--out", type=path, default=None, metavar="DIR",
                      help="folder for the simulated run (default ./demo_runs/"
                           "megatron_tp2_pp4_dp2_vpp2)")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse demo``."""
    from tracehouse.build.dbt import DbtBuildError
    from tracehouse.cli.demo_run import run_demo

    try:
        run_demo(out=args.out, warehouse=args.warehouse)
    except (DbtBuildError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
