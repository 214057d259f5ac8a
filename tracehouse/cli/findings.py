"""``tracehouse findings``: argument parsing over
:func:`tracehouse.query.findings.print_findings`."""

from __future__ import annotations

import argparse
from typing import Any

from tracehouse.cli.arguments import EXIT_USAGE, add_result_format, name, warehouse_parent
from tracehouse.cli.last_build import lake_is_built

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse findings`` on the main parser's subcommands."""
    findings = sub.add_parser(
        "findings",
        parents=[warehouse_parent()],
        help="what to change, ranked by time at stake, with the evidence and the Megatron flag",
        description=(
            "Print fct_findings' fired rules (seed finding_rules: straggler, stage imbalance, "
            "bubble above theory, too few microbatches, exposed DP/TP communication, "
            "host-bound launches, recompute, GEMMs below the roof, clock skew), ranked by "
            "time at stake, each with the figure that fired it, the mart it comes from, the "
            "Megatron-LM change and where the report and viewer show it. Without --iteration "
            "each run's rules are summed over its iterations (share of the run's steps). "
            "Rules that could not be evaluated are listed with the reason. Time at stake "
            "comes from the what-if replay where it prices the rule (straggler, stage "
            "imbalance, exposed DP communication, host-bound launches), else from the rule's "
            "own figure, as after a build with --vars '{whatif: false}'."
        ),
    )
    findings.add_argument("--run", type=name, metavar="NAME", help="one run (default: all)")
    findings.add_argument("--iteration", type=int, metavar="N",
                          help="one iteration's findings (default: summed over iterations)")
    add_result_format(findings, "table format: never cut long values")
    findings.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse findings``."""
    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.query.findings import print_findings

    if not lake_is_built(args.warehouse, [args.run] if args.run else []):
        return EXIT_USAGE
    return print_findings(resolve_warehouse(args.warehouse), args.run, args.iteration,
                          fmt=args.format, wide=args.wide)
