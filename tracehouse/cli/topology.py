"""``tracehouse topology``: argument parsing over
:func:`tracehouse.core.topology.build_topology`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_parallel_sizes, path

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse topology`` on the main parser's subcommands."""
    topology = sub.add_parser(
        "topology",
        help="print (or write) Megatron's exact parallel groups for a layout",
        description=(
            "Build every process group megatron-core's initialize_model_parallel creates "
            "for a layout (its RankGenerator, reproduced exactly) and print it as topology "
            "JSON, the format `tracehouse ingest` reads from topology*.json beside traces. "
            "Layouts Megatron rejects are usage errors (exit 2)."
        ),
    )
    topology.add_argument("--world", type=int, required=True, metavar="N",
                          help="number of ranks")
    add_parallel_sizes(topology, ("--tp", "--pp", "--cp", "--ep", "--etp", "--vpp"),
                       required=("--tp", "--pp"))
    topology.add_argument("--order", default="tp-cp-ep-dp-pp", metavar="ORDER",
                          help="rank order, fastest-varying first, as Megatron's --order "
                               "(default tp-cp-ep-dp-pp)")
    topology.add_argument("--format", choices=("json", "traceviz"), default="json",
                          help="topology JSON (default) or Megatron-TraceViz's "
                               "unique_parallel_groups text")
    topology.add_argument("--out", type=path, default=None, metavar="FILE",
                          help="write to FILE instead of standard output")
    topology.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse topology``."""
    from tracehouse.core.topology import build_topology
    from tracehouse.core.topology_files import format_traceviz_txt, topology_json

    try:
        topo = build_topology(world=args.world, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep,
                              etp=args.etp, vpp=args.vpp, order=args.order)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Marked so ingest ranks it below what a job recorded (source `generated`).
    topo["generator"] = "tracehouse topology"
    text = topology_json(topo) if args.format == "json" else format_traceviz_txt(topo)
    if args.out is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    except OSError as exc:
        print(f"error: {args.out}: cannot write: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote the topology of {args.world} ranks to {args.out}", file=sys.stderr)
    return EXIT_OK
