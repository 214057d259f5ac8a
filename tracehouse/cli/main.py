"""The ``tracehouse`` command: a thin argument layer over library functions.

Each subcommand parses its arguments and calls one function that tests call
directly. Exit codes: 0 success, 1 some inputs failed (the rest landed),
2 usage error.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tracehouse.core.warehouse import ENV_VAR

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _path(text: str) -> Path:
    """argparse type for a path: an empty string is a mistake, not the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (give a file or folder name)")
    return Path(text)


def _warehouse_dir(text: str) -> str:
    """argparse type for ``--warehouse``: not empty, and not a file that exists."""
    path = _path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a warehouse folder")
    return text


def _name(text: str) -> str:
    """argparse type for a name (run, table, program): not empty or blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name")
    return text


def _warehouse_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--warehouse",
        type=_warehouse_dir,
        metavar="DIR",
        help=f"warehouse folder (default: ${ENV_VAR}, else ./warehouse)",
    )
    return parent


def _version() -> str:
    """The installed distribution's version (pyproject.toml), else ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracehouse")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tracehouse",
        description="SQL-centric analytics warehouse for distributed LLM-training traces.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    common = _warehouse_parent()

    ingest = sub.add_parser(
        "ingest",
        parents=[common],
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
    ingest.add_argument("paths", nargs="+", type=_path, metavar="PATH")
    ingest.add_argument("--run", type=_name, metavar="NAME",
                        help="run name for every file (default: each trace's job folder)")
    ingest.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                        help="worker processes (default: number of CPUs, at most 8)")
    ingest.add_argument("--force", action="store_true",
                        help="reload files even if they are already loaded and unchanged")
    ingest.add_argument("--engine", choices=("native", "perfetto", "spark"), default="native",
                        help="parser: tracehouse's own (default), Perfetto trace processor, "
                             "or tracehouse's own in Spark tasks ($TRACEHOUSE_SPARK_MASTER, "
                             "default local[2]; needs the spark extra)")
    ingest.add_argument("--shard", metavar="I/N", default=None,
                        help="load only shard I (0-based) of N: a deterministic 1/N of the "
                             "files, so N ingests on N machines (e.g. a Slurm array) fill one "
                             "shared lake without coordination")
    ingest.add_argument("--trace-processor-bin", type=_name, metavar="FILE",
                        help="trace_processor_shell for --engine perfetto "
                             "(default: $TRACE_PROCESSOR_BIN)")
    ingest.add_argument("-q", "--quiet", action="store_true",
                        help="no progress output, only errors and the summary")
    ingest.set_defaults(handler=_cmd_ingest)

    build = sub.add_parser(
        "build",
        parents=[common],
        help="run dbt (default: dbt build) on the warehouse",
        description="Run the dbt project on the warehouse. tracehouse's own option "
                    "(--warehouse) may stand anywhere; every other argument goes to dbt, in "
                    "order, e.g. `tracehouse build -- run -s stg_lake__slices`.",
    )
    build.add_argument("dbt_args", nargs=argparse.REMAINDER, metavar="DBT_ARGS",
                       help="dbt command and arguments (default: build)")
    build.set_defaults(handler=_cmd_build)

    sql = sub.add_parser(
        "sql",
        parents=[common],
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
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument("--wide", action="store_true",
                     help="table format: never cut long values (default: cut in the middle)")
    sql.add_argument("--allow-files", action="store_true",
                     help="let the query read and write any file (read_csv, copy ... to, "
                          "attach, and create or drop what it attaches); by default it reads "
                          "only the warehouse and changes nothing (exit 2)")
    sql.set_defaults(handler=_cmd_sql)

    compare = sub.add_parser(
        "compare",
        parents=[common],
        help="two runs' iteration summaries side by side, with the differences",
        description=(
            "Print fct_iteration_summary of two runs side by side: step time (the slowest "
            "rank's step), its difference in ms and %, exposed communication share, "
            "pipeline bubble, slowest rank, straggler and worst collective skew. "
            "Iterations are paired by their order within each run; the last row compares "
            "the means. An unknown run is a usage error (exit 2)."
        ),
    )
    compare.add_argument("run_a", type=_name, metavar="RUN_A", help="the baseline run")
    compare.add_argument("run_b", type=_name, metavar="RUN_B", help="the run compared with it")
    compare.add_argument("--format", choices=("table", "csv", "json"), default="table")
    compare.add_argument("--wide", action="store_true",
                         help="table format: never cut long values")
    compare.set_defaults(handler=_cmd_compare)

    simulate = sub.add_parser(
        "simulate",
        help="write a synthetic Megatron-LM run as real-format Kineto traces",
        description=(
            "Simulate a Megatron-LM training run (megatron-core's 1F1B or interleaved "
            "schedule, TP/PP/DP/CP/EP groups, NCCL collectives) and write it as the Megatron "
            "patch lays it out: DIR/topology.json, DIR/iteration_N/rank_XXXX_iter_N.pt.trace"
            ".json.gz and DIR/ground_truth.json (what was injected, the analytical bubble)."
        ),
    )
    for flag, what in (("--tp", "tensor"), ("--pp", "pipeline"), ("--dp", "data")):
        simulate.add_argument(flag, type=int, required=True, metavar="N",
                              help=f"{what}-parallel size")
    simulate.add_argument("--cp", type=int, default=1, metavar="N",
                          help="context-parallel size (default 1)")
    simulate.add_argument("--ep", type=int, default=1, metavar="N",
                          help="expert-parallel size; > 1 makes the MLPs MoE layers (default 1)")
    simulate.add_argument("--etp", type=int, default=None, metavar="N",
                          help="expert tensor-parallel size (default: --tp)")
    simulate.add_argument("--vpp", type=int, default=1, metavar="N",
                          help="model chunks per pipeline rank (virtual pipeline, default 1)")
    simulate.add_argument("--microbatches", type=int, required=True, metavar="M")
    simulate.add_argument("--iterations", type=int, required=True, metavar="K",
                          help="traced iterations (one file per rank per iteration)")
    simulate.add_argument("--schedule", choices=("1f1b", "interleaved"), default=None,
                          help="pipeline schedule (default: interleaved when --vpp > 1)")
    simulate.add_argument("--layers", type=int, default=32, metavar="L",
                          help="transformer layers (default 32; divisible by pp*vpp)")
    simulate.add_argument("--hidden", type=int, default=4096, metavar="H",
                          help="hidden size (default 4096)")
    simulate.add_argument("--heads", type=int, default=32, metavar="N",
                          help="attention heads (default 32)")
    simulate.add_argument("--seq-length", type=int, default=4096, metavar="S",
                          help="sequence length (default 4096)")
    simulate.add_argument("--sequence-parallel", action="store_true",
                          help="Megatron sequence parallelism (all-gather/reduce-scatter)")
    simulate.add_argument("--record-shapes", action="store_true",
                          help="write the transformer ops' shapes (Input Dims, Input type, "
                               "Concrete Inputs), as the profiler's record_shapes does: the "
                               "warehouse then gives each GEMM and attention kernel its FLOPs")
    simulate.add_argument("--straggler", action="extend", nargs="+", default=[],
                          metavar="RANK:FACTOR",
                          help="slow ranks' compute kernels, e.g. 5:1.5 (several allowed)")
    simulate.add_argument("--clock-skew-us", type=float, default=0.0, metavar="X",
                          help="largest per-node clock offset in microseconds (default 0)")
    simulate.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                          help="ranks per node: rank r runs on node r // G (default 8)")
    simulate.add_argument("--seed", type=int, default=0, metavar="S",
                          help="seed of jitter and clock offsets (default 0)")
    simulate.add_argument("--first-iteration", type=int, default=1, metavar="N",
                          help="number of the first traced iteration (default 1)")
    simulate.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                          help="worker processes writing traces (default: CPUs, at most 8)")
    simulate.add_argument("--out", type=_path, required=True, metavar="DIR",
                          help="folder for the run (created)")
    simulate.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    simulate.set_defaults(handler=_cmd_simulate)

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
    topology.add_argument("--tp", type=int, required=True, metavar="N",
                          help="tensor-parallel size")
    topology.add_argument("--pp", type=int, required=True, metavar="N",
                          help="pipeline-parallel size")
    topology.add_argument("--cp", type=int, default=1, metavar="N",
                          help="context-parallel size (default 1)")
    topology.add_argument("--ep", type=int, default=1, metavar="N",
                          help="expert-parallel size (default 1)")
    topology.add_argument("--etp", type=int, default=None, metavar="N",
                          help="expert tensor-parallel size (default: --tp)")
    topology.add_argument("--vpp", type=int, default=None, metavar="N",
                          help="virtual pipeline size (model chunks per pipeline rank)")
    topology.add_argument("--order", default="tp-cp-ep-dp-pp", metavar="ORDER",
                          help="rank order, fastest-varying first, as Megatron's --order "
                               "(default tp-cp-ep-dp-pp)")
    topology.add_argument("--format", choices=("json", "traceviz"), default="json",
                          help="topology JSON (default) or Megatron-TraceViz's "
                               "unique_parallel_groups text")
    topology.add_argument("--out", type=_path, default=None, metavar="FILE",
                          help="write to FILE instead of standard output")
    topology.set_defaults(handler=_cmd_topology)

    report = sub.add_parser(
        "report",
        parents=[common],
        help="render every chart and an index.html report from the marts",
        description=(
            "Render every chart family (PNG and SVG) and an index.html report for one run "
            "from the warehouse's marts. The report is swapped in atomically; when the marts "
            "have not changed since the last report it is left as it is (--force re-renders). "
            "Exit 1 when a chart family failed (the others are still rendered)."
        ),
    )
    report.add_argument("--run", type=_name, metavar="NAME",
                        help="run to report (default: the only run, else the newest)")
    report.add_argument("--compare", type=_name, metavar="NAME",
                        help="a second run to compare with, side by side")
    report.add_argument("--out", type=_path, default=None, metavar="DIR",
                        help="report folder (default: <warehouse>/reports/<run>)")
    report.add_argument("--force", action="store_true",
                        help="re-render even when the marts have not changed")
    report.add_argument("-q", "--quiet", action="store_true",
                        help="no progress output, only failed chart families and where the "
                             "report is")
    report.set_defaults(handler=_cmd_report)

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
        parents=[common],
        help="merged multi-rank timeline (Perfetto protobuf, or Chrome JSON)",
        description=(
            "Write one timeline holding many ranks: each rank a process named with its "
            "parallel coordinates, its CPU steps and GPU streams, kernels coloured by kind "
            "and named with phase, microbatch and group. Choose ranks with --ranks, "
            "--pp-group or --replica (default: every rank)."
        ),
    )
    perfetto.add_argument("--run", type=_name, required=True, metavar="NAME",
                          help="run to export")
    select = perfetto.add_mutually_exclusive_group()
    select.add_argument("--ranks", type=_rank_list, default=None, metavar="LIST",
                        help="ranks, e.g. 0,1,4-7")
    select.add_argument("--pp-group", type=int, default=None, metavar="N",
                        help="the ranks of pipeline group N (dim_ranks.pp_group_index)")
    select.add_argument("--replica", type=int, default=None, metavar="N",
                        help="the ranks of model replica N (dim_ranks.model_replica)")
    perfetto.add_argument("--format", choices=("proto", "json"), default="proto",
                          help="Perfetto protobuf (default) or Chrome trace JSON")
    perfetto.add_argument("--out", type=_path, required=True, metavar="FILE")
    perfetto.set_defaults(handler=_cmd_export_perfetto)
    table = export_sub.add_parser(
        "table",
        parents=[common],
        help="a mart or table as CSV or Parquet",
        description="Write one table of the warehouse (e.g. fct_rank_iterations) to FILE; "
                    "the format comes from --format, else FILE's suffix.",
    )
    table.add_argument("table", type=_name, metavar="TABLE")
    table.add_argument("--run", type=_name, metavar="NAME", help="only this run's rows")
    table.add_argument("--format", choices=("csv", "parquet"), default=None)
    table.add_argument("--out", type=_path, required=True, metavar="FILE")
    table.set_defaults(handler=_cmd_export_table)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="simulate a small run, load it, build the warehouse, print headline numbers",
        description=(
            "Simulate a 16-rank Megatron run (TP2 x PP4 x DP2, interleaved, 2 iterations, "
            "one straggler), ingest it, run dbt build, and print per-rank GPU time and where "
            "the warehouse is."
        ),
    )
    demo.add_argument("--out", type=_path, default=None, metavar="DIR",
                      help="folder for the simulated run (default ./demo_runs/"
                           "megatron_tp2_pp4_dp2_vpp2)")
    demo.set_defaults(handler=_cmd_demo)
    from tracehouse.cli.nsys import add_parser as add_nsys_parser

    add_nsys_parser(sub)
    from tracehouse.cli.commtrace import add_parser as add_commtrace_parser

    add_commtrace_parser(sub)
    from tracehouse.cli.serve import add_parser as add_serve_parser

    add_serve_parser(sub)
    return parser


def _cmd_ingest(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.ingest.discover import DiscoveryError
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
    if args.engine == "spark":
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
            engine=args.engine,
            trace_processor_bin=args.trace_processor_bin,
            shard=shard,
        )
    except (DiscoveryError, EngineUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in result.empty_paths:
        print(f"warning: {path}: no trace, topology, PP-timer or comm-log files found there "
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


def _own_build_options(dbt_args: list[str]) -> tuple[str | None, list[str]]:
    """``--warehouse DIR`` (or ``--warehouse=DIR``) wherever it stands among the
    arguments argparse left to dbt, and those arguments without it (the last
    one given wins, as argparse does). dbt has no ``--warehouse``, so the
    option is always tracehouse's."""
    warehouse = None
    kept: list[str] = []
    words = iter(dbt_args)
    for word in words:
        if word == "--warehouse":
            warehouse = next(words, "")
        elif word.startswith("--warehouse="):
            warehouse = word.split("=", 1)[1]
        else:
            kept.append(word)
    return warehouse, kept


def _cmd_build(args: argparse.Namespace) -> int:
    from tracehouse.build.dbt import run_dbt
    from tracehouse.core.warehouse import resolve_warehouse

    dbt_args = list(args.dbt_args)
    if dbt_args[:1] == ["--"]:
        dbt_args = dbt_args[1:]
    return run_dbt(dbt_args, warehouse=resolve_warehouse(args.warehouse))


def _lake_is_built(warehouse: str | None, runs: Sequence[str | None] = ()) -> bool:
    """Say on stderr when the lake holds traces the last build has not seen
    (:mod:`tracehouse.build.freshness`); False, after an error line, when one of ``runs``
    (named on the command line) is only in the lake: not unknown, just not built."""
    from tracehouse.build.freshness import unbuilt_traces
    from tracehouse.core.warehouse import Warehouse

    unbuilt = unbuilt_traces(Warehouse.at(warehouse))
    if unbuilt is None:
        return True
    for run_id in runs:
        if unbuilt.only_in_lake(run_id):
            print(f"error: {unbuilt.unbuilt_run(str(run_id))}", file=sys.stderr)
            return False
    print(unbuilt.note(), file=sys.stderr)
    return True


def _cmd_sql(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.query.sql import run_sql

    _lake_is_built(args.warehouse)
    query = args.query
    if query == "-":
        try:
            query = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            print(f"error: standard input: the query is not UTF-8 ({exc.reason} at byte "
                  f"{exc.start})", file=sys.stderr)
            return EXIT_USAGE
    return run_sql(query, resolve_warehouse(args.warehouse), fmt=args.format, wide=args.wide,
                   allow_files=args.allow_files)


def _cmd_compare(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.query.compare_runs import compare_runs

    if not _lake_is_built(args.warehouse, [args.run_a, args.run_b]):
        return EXIT_USAGE
    return compare_runs(args.run_a, args.run_b, resolve_warehouse(args.warehouse),
                        fmt=args.format, wide=args.wide)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from tracehouse.simulate import SimConfig, parse_straggler, simulate_run

    try:
        stragglers = tuple(parse_straggler(text) for text in args.straggler)
        schedule = args.schedule or ("interleaved" if args.vpp > 1 else "1f1b")
        config = SimConfig(
            tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, etp=args.etp,
            vpp=args.vpp, microbatches=args.microbatches, iterations=args.iterations,
            schedule=schedule, layers=args.layers, hidden=args.hidden, heads=args.heads,
            seq_length=args.seq_length, sequence_parallel=args.sequence_parallel,
            stragglers=stragglers, clock_skew_us=args.clock_skew_us,
            gpus_per_node=args.gpus_per_node, seed=args.seed,
            first_iteration=args.first_iteration, record_shapes=args.record_shapes,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs is not None and args.jobs < 1:
        print("error: -j/--jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    run = simulate_run(config, args.out, jobs=args.jobs, progress=not args.quiet)
    print(
        f"simulated {config.world} ranks x {config.iterations} iteration(s) "
        f"({run.events:,} events) into {run.out_dir} in {run.seconds:.1f} s; "
        f"ground truth: {run.ground_truth_path}",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_topology(args: argparse.Namespace) -> int:
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


def _rank_list(text: str) -> list[int]:
    """Parse ``0,1,4-7`` into ``[0, 1, 4, 5, 6, 7]`` (argparse type)."""
    ranks: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            lo = int(first)
            hi = int(last) if last else lo
            if hi < lo or lo < 0:
                raise ValueError
            ranks.extend(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a rank list (e.g. 0,1,4-7)") from None
    return sorted(set(ranks))


def _cmd_report(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.report import ReportError, render_report

    if not _lake_is_built(args.warehouse, [args.run, args.compare]):
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


def _cmd_export_perfetto(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.perfetto import ExportError, export_perfetto

    if not _lake_is_built(args.warehouse, [args.run]):
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


def _cmd_export_table(args: argparse.Namespace) -> int:
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.table_export import ExportError, export_table

    if not _lake_is_built(args.warehouse, [args.run]):
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from tracehouse.build.dbt import DbtBuildError
    from tracehouse.cli.demo import run_demo

    try:
        run_demo(out=args.out, warehouse=args.warehouse)
    except (DbtBuildError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


#: Exit status of a command whose reader closed the pipe (``| head``): what any
#: unix tool killed by SIGPIPE reports, 128 + 13.
EXIT_BROKEN_PIPE = 141


def _reader_went_away() -> int:
    """Standard output's reader closed the pipe: stop quietly, like other unix tools.

    What is still buffered can never be written; standard output is pointed at
    /dev/null so that flushing it at exit does not fail again (Python's advice
    for SIGPIPE, docs.python.org/3/library/signal.html#note-on-sigpipe).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (an embedding's stdout)
        pass
    return EXIT_BROKEN_PIPE


def console_main() -> int:
    """The ``tracehouse`` console script: :func:`main` on ``sys.argv``.

    A process that runs ``tracehouse ingest`` does nothing else, so it keeps
    pyarrow from importing pandas (see ``ingest.no_pandas.keep_pandas_out``).
    """
    if sys.argv[1:2] == ["ingest"]:
        from tracehouse.ingest.no_pandas import keep_pandas_out

        keep_pandas_out()
    code = main()
    try:
        sys.stdout.flush()  # here, not at exit, where a closed pipe cannot be caught
    except BrokenPipeError:
        return _reader_went_away()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for tests and embedding: parse ``argv`` and run one command."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if getattr(args, "handler", None) is _cmd_build:
            # dbt options before any dbt command (`tracehouse build --full-refresh`)
            # go to dbt's default command, build; tracehouse's own options among
            # them (`build --target spark --warehouse W`) are taken out.
            warehouse, args.dbt_args = _own_build_options([*unknown, *args.dbt_args])
            if warehouse is not None:
                try:
                    args.warehouse = _warehouse_dir(warehouse)
                except argparse.ArgumentTypeError as exc:
                    parser.error(f"argument --warehouse: {exc}")
        elif unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        return _reader_went_away()
    except OSError as exc:  # a path the user gave cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; nothing partial was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(console_main())
