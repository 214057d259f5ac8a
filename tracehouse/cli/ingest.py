"""``tracehouse ingest``: argument parsing over :func:`tracehouse.ingest.runner.ingest_paths`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_USAGE, name, path, warehouse_parent
from tracehouse.ingest.kineto.engine import DECODER_ENV, KinetoEngine, choices

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse ingest`` on the main parser's subcommands."""
    ingest = sub.add_parser(
        "ingest",
        parents=[warehouse_parent()],
        help="load traces into the warehouse's Parquet lake (incremental)",
        description=(
            "Find every input under PATH... and load it into the lake: Kineto traces "
            "(*.json, *.json.gz), Nsight Systems exports (*.sqlite, any SQLite file, "
            "*.nsys-rep with nsys on PATH), topology files (topology*.json, "
            "unique_parallel_groups_*.txt), PP-timer logs (event_times_PP*.json) and comm "
            "logs (comm_log_rank_*.json). Files already loaded and unchanged are skipped; "
            "bad files are reported and recorded in ingest_errors while the good ones still "
            "land. A PATH holding none of these is named in a warning; when no PATH holds "
            "any, ingest exits 2."
        ),
    )
    ingest.add_argument("paths", nargs="+", type=path, metavar="PATH")
    ingest.add_argument("--run", type=name, metavar="NAME",
                        help="run name for every file (default: each trace's job folder)")
    ingest.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                        help="worker processes (default: number of CPUs, at most 8)")
    ingest.add_argument("--force", action="store_true",
                        help="reload files even if they are already loaded and unchanged")
    ingest.add_argument("--engine", choices=choices(), default=KinetoEngine.NATIVE.value,
                        help="parser: tracehouse's own (native, the default: the compiled "
                             "scanner where built, else msgspec; scanner or msgspec to pick "
                             f"one; ${DECODER_ENV}=python makes native msgspec), Perfetto's "
                             "trace processor (perfetto), or tracehouse's own in Spark tasks "
                             "(spark: $TRACEHOUSE_SPARK_MASTER, default local[2]; needs the "
                             "spark extra)")
    ingest.add_argument("--shard", metavar="I/N", default=None,
                        help="load only shard I (0-based) of N: a deterministic 1/N of the "
                             "files, so N ingests on N machines (e.g. a Slurm array) fill one "
                             "shared lake without coordination")
    ingest.add_argument("--trace-processor-bin", type=name, metavar="FILE",
                        help="trace_processor_shell for --engine perfetto "
                             "(default: $TRACE_PROCESSOR_BIN)")
    ingest.add_argument("-q", "--quiet", action="store_true",
                        help="no progress output, only errors and the summary")
    ingest.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse ingest``."""
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.ingest.discover import DiscoveryError
    from tracehouse.ingest.kineto.engine import UnknownEngine
    from tracehouse.ingest.runner import EngineUnavailable, default_jobs, ingest_paths

    jobs = args.jobs if args.jobs is not None else default_jobs()
    if jobs < 1:
        print("error: -j/--jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    shard = None
    if args.shard is not None:
        from tracehouse.ingest.shard import Shard

        try:
            shard = Shard.parse(args.shard)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    engine = KinetoEngine.parse(args.engine)
    if engine is KinetoEngine.SPARK:
        import importlib.util

        if importlib.util.find_spec("pyspark") is None:
            print("error: --engine spark needs pyspark, which is not installed "
                  "(pip install -e '.[spark]'; Java 17 too)", file=sys.stderr)
            return EXIT_USAGE
    warehouse = Warehouse.at(args.warehouse)
    try:
        result = ingest_paths(
            args.paths,
            warehouse=warehouse,
            run=args.run,
            jobs=jobs,
            force=args.force,
            progress=not args.quiet,
            engine=engine,
            trace_processor_bin=args.trace_processor_bin,
            shard=shard,
        )
    except (DiscoveryError, EngineUnavailable, UnknownEngine) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for empty in result.empty_paths:
        print(f"warning: {empty}: no trace, topology, PP-timer or comm-log files found there "
              "(Kineto *.json[.gz], Nsight *.sqlite / *.nsys-rep, topology*.json, "
              "event_times_PP*.json, comm_log_rank_*.json)", file=sys.stderr)
    if result.empty_paths and len(result.empty_paths) == len(args.paths):
        print("error: nothing to ingest", file=sys.stderr)
        return EXIT_USAGE
    print(result.summary(into=warehouse.lake), file=sys.stderr)
    if result.failed:
        print(
            f"{len(result.failed)} file(s) failed; see the lines above or "
            "`tracehouse sql \"select * from ingest_errors\"`",
            file=sys.stderr,
        )
    return result.exit_code
