#!/usr/bin/env python3
"""Models benchmark: ``dbt build`` of the warehouse on a simulated Megatron-LM run.

One command, prints figures (benchmarks/README.md says what each means):

1. simulate a run (default TP4 x PP8 x DP8 = 256 ranks, 16 microbatches,
   2 iterations, plus one more iteration kept aside) with ``tracehouse
   simulate``'s library call;
2. ingest the first iterations into a fresh warehouse (``-j 2``), and time
   ``dbt parse`` with an empty parse cache (the scratch folder's own), which
   the first build from a checkout pays once;
3. ``tracehouse build`` (``tracehouse.build.dbt.run_dbt(["build"])``: every model
   and data test) in a child process pinned to ``--cores`` CPUs: wall time,
   peak RSS (the child's ``ru_maxrss`` from ``wait4``, exact, DuckDB included
   since it runs in process), rows in ``fct_kernels``, and rows per second
   through the interval models from dbt's ``run_results.json``;
4. the same build again with nothing changed;
5. move the kept iteration into the run folder, ingest it (the others are
   skipped as unchanged) and time the incremental build, then a
   ``--full-refresh`` build of the same data: the ratios to quote are
   no-change / full and +1 iteration / full refresh of all iterations.

``--baseline-project DIR`` times the same three builds with another checkout
of the dbt project (e.g. ``git worktree add /tmp/base <commit>``) on the same
lake, in the same run, with plain ``dbt build`` (the way that checkout built),
so old and new are compared on one machine under one load.

``--scale`` then repeats the measurement on bigger runs (512 and 1024 ranks,
then more iterations) until one step fails or runs past ``--timeout``, and
says which step broke and why.

    python benchmarks/models.py [--tp 4 --pp 8 --dp 8] [--microbatches 16]
                                [--iterations 2] [--jobs 2] [--cores 2]
                                [--memory-limit 8GB] [--scale] [--timeout S]
                                [--baseline-project DIR]
                                [--json OUT] [--tmp DIR] [--keep]

Why a child process per build: ``ru_maxrss`` is a high-water mark per
process, so each build needs its own to be measured alone, and a build that
runs out of time can be killed without taking the harness down.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dbt_statements import describe, read_logs, statement_seconds

from tracehouse.build.dbt import PLAIN_BUILD_EXCLUDES

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
#: The interval models whose throughput is quoted, and the model feeding each
#: (its row count is the model's input).
INTERVAL_MODELS = {
    "int_kernel_intervals_merged": "int_kernels_classified",
    "int_rank_iterations_swept": "int_kernel_intervals_merged",
}
#: The distributed-analysis models (issue 11): their summed execution time is
#: what they add to a build (printed per build, beside the kernel chain).
DISTRIBUTED_MODELS = (
    "int_collective_calls_sequenced",
    "int_collective_members_matched",
    "int_rank_clock_offsets_estimated",
    "int_collective_members_aligned",
    "fct_collectives",
    "fct_collective_ranks",
    "fct_stragglers",
    "dim_rank_clock_offsets",
)
#: Where the intermediate models live (macros/generate_schema_name.sql).
INTERMEDIATE_SCHEMA = "intermediate"
#: Bigger runs tried by ``--scale`` after the base run: (tp, pp, dp, iterations).
SCALE_LADDER = [(4, 8, 16, 2), (4, 8, 32, 2), (4, 8, 8, 4), (4, 8, 8, 8)]


@dataclass
class BuildFigures:
    """One ``dbt build`` in a child process."""

    ok: bool
    seconds: float
    #: user + system CPU seconds of the child (DuckDB's threads included): on a
    #: shared, busy machine this moves far less than wall time does.
    cpu_seconds: float
    peak_rss_mib: float
    exit_code: int | None
    error: str = ""
    model_seconds: dict[str, float] = field(default_factory=dict)
    slowest: list[tuple[str, float]] = field(default_factory=list)
    #: Statements and their summed seconds by kind, from dbt's debug log
    #: (benchmarks/dbt_statements.py): model queries against per-node upkeep.
    statement_seconds: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: The build said the project changed and refreshed every incremental
    #: table; after adding one iteration this must stay False.
    refreshed_everything: bool = False


@dataclass
class RunFigures:
    """Every figure of one simulated run (README: "What is measured")."""

    tp: int
    pp: int
    dp: int
    world: int
    microbatches: int
    iterations: int
    simulate_seconds: float = 0.0
    #: 1-minute load average when the run started and when it ended: above the
    #: core count, other work shared the CPUs and wall times are inflated.
    load_before: float = 0.0
    load_after: float = 0.0
    events: int = 0
    trace_mib: float = 0.0
    ingest_seconds: float = 0.0
    ingest_files: int = 0
    #: ``dbt parse`` on an empty warehouse with an empty parse cache: what the
    #: first build from a checkout spends parsing; every build timed here
    #: starts from the parse it saved (tracehouse/build/parse_cache.py).
    cold_parse: BuildFigures | None = None
    build: BuildFigures | None = None
    #: The same build again, nothing changed.
    unchanged_build: BuildFigures | None = None
    rows: dict[str, int] = field(default_factory=dict)
    rows_per_second: dict[str, float] = field(default_factory=dict)
    database_mib: float = 0.0
    incremental_ingest_seconds: float = 0.0
    incremental_build: BuildFigures | None = None
    incremental_rows: dict[str, int] = field(default_factory=dict)
    #: `dbt build --full-refresh` of the same warehouse after the incremental
    #: build: what the incremental build saves.
    full_refresh_build: BuildFigures | None = None
    #: --baseline-project: the other checkout's full, unchanged and +1 builds.
    baseline_build: BuildFigures | None = None
    baseline_unchanged_build: BuildFigures | None = None
    baseline_incremental_build: BuildFigures | None = None
    broke_at: str = ""


# --------------------------------------------------------------------------- child side


def _child_build(warehouse: str, cores: int, memory_limit: str, dbt_args: list[str]) -> int:
    """Body of the build child: pin to ``cores`` CPUs, then run ``tracehouse build``.

    ``dbt_args`` starting with ``--project=DIR`` run plain ``dbt`` on that
    checkout of the project instead (``--baseline-project``).
    """
    if hasattr(os, "sched_setaffinity"):
        available = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, available[:cores])
    if memory_limit:
        os.environ["TRACEHOUSE_MEMORY_LIMIT"] = memory_limit  # read by profiles.yml
    if dbt_args[:1] and dbt_args[0].startswith("--project="):
        project = dbt_args[0].split("=", 1)[1]
        os.environ["TRACEHOUSE_WAREHOUSE"] = warehouse
        from dbt.cli.main import dbtRunner

        artifacts = Path(warehouse) / "dbt"
        result = dbtRunner().invoke([
            "build", "--project-dir", project, "--profiles-dir", project,
            "--target-path", str(artifacts / "target"), "--log-path", str(artifacts / "logs"),
            *dbt_args[1:],
        ])  # fmt: skip
        return 0 if result.success else 1
    from tracehouse.build.dbt import run_dbt

    if dbt_args[:1] == ["parse"]:
        return run_dbt(["parse"], Path(warehouse))
    return run_dbt(["build", *dbt_args] if dbt_args else ["build"], Path(warehouse))


# --------------------------------------------------------------------------- parent side


def run_build(
    warehouse: Path,
    cores: int,
    timeout: float,
    memory_limit: str,
    log: Path,
    dbt_args: tuple[str, ...] = (),
) -> BuildFigures:
    """Run ``dbt build`` on ``warehouse`` in a fresh child; time it and read its peak RSS."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "_build",
        str(warehouse),
        str(cores),
        memory_limit,
        *dbt_args,
    ]
    # dbt appends to (and rotates) its log: start empty, to read this build's.
    dbt_logs = warehouse / "dbt" / "logs"
    shutil.rmtree(dbt_logs, ignore_errors=True)
    started = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout:
                proc.kill()
                timed_out = True
                _pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.1)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped by wait4; keep Popen from waiting again
    figures = BuildFigures(
        ok=code == 0 and not timed_out,
        seconds=seconds,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_rss_mib=usage.ru_maxrss * 1024 / MIB,
        exit_code=code,
    )
    if timed_out:
        figures.error = f"timed out after {timeout:.0f} s"
    elif code != 0:
        figures.error = f"exit code {code}: {_last_error(log)}"
    _read_run_results(warehouse, figures)
    figures.statement_seconds = statement_seconds(read_logs(dbt_logs))
    figures.refreshed_everything = "rebuilding every per-trace table" in log.read_text(
        errors="replace"
    )
    return figures


def _last_error(log: Path) -> str:
    """The first dbt error line of a build log, for the figures table."""
    lines = log.read_text(errors="replace").splitlines()
    for marker in ("Error", "error", "Killed", "MemoryError"):
        for line in lines:
            if marker in line and "ERROR=0" not in line:
                return line.strip()[-200:]
    return lines[-1].strip()[-200:] if lines else "no output"


def _read_run_results(warehouse: Path, figures: BuildFigures) -> None:
    """Per-model execution times from ``<warehouse>/dbt/target/run_results.json``."""
    path = warehouse / "dbt" / "target" / "run_results.json"
    if not path.is_file():
        return
    results = json.loads(path.read_text())["results"]
    times = {r["unique_id"]: float(r["execution_time"]) for r in results}
    figures.model_seconds = {
        uid.split(".")[-1]: seconds for uid, seconds in times.items() if uid.startswith("model.")
    }
    figures.slowest = sorted(
        (
            (uid.removeprefix("model.tracehouse."), seconds)
            for uid, seconds in times.items()
            if uid.startswith("model.")
        ),
        key=lambda item: -item[1],
    )[:6]


def plain_build_excludes(project: Path) -> tuple[str, ...]:
    """What a plain ``tracehouse build`` of the checkout at ``project`` leaves out
    (its ``PLAIN_BUILD_EXCLUDES``), so that a baseline runs what it ran: an
    older checkout loads its seeds through seed nodes, which this one's
    excludes leave out. This checkout's when the file does not say."""
    source = Path(project) / "tracehouse" / "build" / "dbt.py"
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError):
        return PLAIN_BUILD_EXCLUDES
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "PLAIN_BUILD_EXCLUDES" for t in node.targets)):
            return tuple(ast.literal_eval(node.value))
    return PLAIN_BUILD_EXCLUDES


def count_rows(warehouse: Path, tables: list[str]) -> dict[str, int]:
    """Row counts of built tables (read-only; table names are ours, not trace data)."""
    import duckdb

    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    try:
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables}
    finally:
        con.close()


def measure(
    args: argparse.Namespace, tp: int, pp: int, dp: int, iterations: int, scratch: Path
) -> RunFigures:
    """Simulate, ingest, build, add one iteration, build again; stop at the first failure."""
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import SimConfig, simulate_run

    world = tp * pp * dp
    figures = RunFigures(
        tp=tp, pp=pp, dp=dp, world=world, microbatches=args.microbatches, iterations=iterations
    )
    figures.load_before = os.getloadavg()[0]
    name = f"tp{tp}_pp{pp}_dp{dp}_it{iterations}"
    sim_dir, warehouse = scratch / name / "sim", scratch / name / "warehouse"
    parked = scratch / name / "parked"
    _say(
        f"{name}: {world} ranks x {iterations} iterations (+1 added later), "
        f"{args.microbatches} microbatches"
    )

    config = SimConfig(
        tp=tp, pp=pp, dp=dp, microbatches=args.microbatches, iterations=iterations + 1
    )
    began = time.perf_counter()
    run = simulate_run(config, sim_dir, jobs=args.jobs)
    figures.simulate_seconds = time.perf_counter() - began
    figures.events = run.events
    figures.trace_mib = sum(p.stat().st_size for p in run.trace_paths) / MIB
    _say(
        f"  simulate: {figures.simulate_seconds:.1f} s, {run.events:,} events, "
        f"{figures.trace_mib:.0f} MiB gzip"
    )

    last = max(config.iteration_numbers)
    shutil.move(sim_dir / f"iteration_{last}", parked)
    began = time.perf_counter()
    result = ingest_paths([sim_dir], warehouse=warehouse, run=name, jobs=args.jobs, progress=False)
    figures.ingest_seconds = time.perf_counter() - began
    figures.ingest_files = len(result.loaded)
    if result.failed:
        figures.broke_at = f"ingest: {len(result.failed)} file(s) failed: {result.failed[0]}"
        return figures
    _say(f"  ingest -j {args.jobs}: {figures.ingest_seconds:.1f} s, {len(result.loaded)} files")

    # The parse cache is the scratch folder's own (main), so the first build
    # of a checkout is measured apart: parse once in another warehouse.
    warmup = scratch / name / "parse_warmup"
    warmup.mkdir()
    figures.cold_parse = run_build(warmup, args.cores, args.timeout, args.memory_limit,
                                   scratch / name / "parse.log", ("parse",))
    _say(f"  dbt parse, empty parse cache: {figures.cold_parse.seconds:.1f} s (once per "
         "checkout; the builds below start from the parse it saved)")
    figures.build = run_build(
        warehouse, args.cores, args.timeout, args.memory_limit, scratch / name / "build.log"
    )
    _say(
        f"  dbt build: {figures.build.seconds:.1f} s ({figures.build.cpu_seconds:.1f} CPU s), "
        f"peak RSS "
        f"{figures.build.peak_rss_mib:.0f} MiB{'' if figures.build.ok else ' FAILED'}"
    )
    if not figures.build.ok:
        figures.broke_at = f"dbt build: {figures.build.error}"
        return figures
    interval_tables = (*INTERVAL_MODELS, *INTERVAL_MODELS.values())
    intermediate = [f"{INTERMEDIATE_SCHEMA}.{m}" for m in interval_tables]
    figures.rows = count_rows(warehouse, ["fct_kernels", *sorted(set(intermediate)),
                                          "fct_rank_iterations", "fct_collectives",
                                          "fct_collective_ranks"])
    for model, source in INTERVAL_MODELS.items():
        seconds = figures.build.model_seconds.get(model)
        if seconds:
            figures.rows_per_second[model] = (
                figures.rows[f"{INTERMEDIATE_SCHEMA}.{source}"] / seconds
            )
    figures.database_mib = (warehouse / "tracehouse.duckdb").stat().st_size / MIB

    figures.unchanged_build = run_build(
        warehouse, args.cores, args.timeout, args.memory_limit, scratch / name / "unchanged.log"
    )
    _say(f"  same build, nothing changed: {figures.unchanged_build.seconds:.1f} s "
         f"({figures.unchanged_build.seconds / figures.build.seconds:.0%} of the full build)")
    baseline = None
    if args.baseline_project:
        baseline = scratch / name / "baseline"
        baseline.mkdir()
        (baseline / "lake").symlink_to(warehouse / "lake")
        # What that checkout's `tracehouse build` runs (its PLAIN_BUILD_EXCLUDES:
        # no unit tests, no tests of the lake itself), so both sides build and
        # test what their own plain build does.
        project = (f"--project={args.baseline_project.resolve()}",
                   *plain_build_excludes(args.baseline_project))
        figures.baseline_build = run_build(
            baseline, args.cores, args.timeout, args.memory_limit,
            scratch / name / "baseline_build.log", project)  # fmt: skip
        figures.baseline_unchanged_build = run_build(
            baseline, args.cores, args.timeout, args.memory_limit,
            scratch / name / "baseline_unchanged.log", project)  # fmt: skip
        _say(f"  baseline {args.baseline_project}: full {figures.baseline_build.seconds:.1f} s "
             f"({figures.baseline_build.cpu_seconds:.1f} CPU s; this checkout / baseline: "
             f"{figures.build.seconds / figures.baseline_build.seconds:.3f} wall, "
             f"{figures.build.cpu_seconds / figures.baseline_build.cpu_seconds:.3f} CPU), "
             f"peak RSS {figures.baseline_build.peak_rss_mib:.0f} MiB; nothing changed "
             "(plain dbt build, every model again) "
             f"{figures.baseline_unchanged_build.seconds:.1f} s")

    shutil.move(parked, sim_dir / f"iteration_{last}")
    began = time.perf_counter()
    result = ingest_paths([sim_dir], warehouse=warehouse, run=name, jobs=args.jobs, progress=False)
    figures.incremental_ingest_seconds = time.perf_counter() - began
    figures.incremental_build = run_build(
        warehouse,
        args.cores,
        args.timeout,
        args.memory_limit,
        scratch / name / "incremental_build.log",
    )
    _say(
        f"  + iteration {last}: ingest {figures.incremental_ingest_seconds:.1f} s "
        f"({len(result.loaded)} files), incremental dbt build "
        f"{figures.incremental_build.seconds:.1f} s, peak RSS "
        f"{figures.incremental_build.peak_rss_mib:.0f} MiB"
        f"{'' if figures.incremental_build.ok else ' FAILED'}"
    )
    if not figures.incremental_build.ok:
        figures.broke_at = f"incremental dbt build: {figures.incremental_build.error}"
        return figures
    if baseline is not None:
        figures.baseline_incremental_build = run_build(
            baseline, args.cores, args.timeout, args.memory_limit,
            scratch / name / "baseline_incremental.log",
            project)  # fmt: skip
        _say(f"  baseline + iteration {last}: {figures.baseline_incremental_build.seconds:.1f} s")
    figures.incremental_rows = count_rows(warehouse, ["fct_kernels", "fct_rank_iterations"])
    figures.full_refresh_build = run_build(
        warehouse,
        args.cores,
        args.timeout,
        args.memory_limit,
        scratch / name / "full_refresh_build.log",
        # What the plain build runs (it leaves unit tests and the lake's own
        # tests to the test suite), from scratch: the build +1 replaces.
        ("--full-refresh", *PLAIN_BUILD_EXCLUDES),
    )
    _say(
        f"  same {iterations + 1} iterations, dbt build --full-refresh: "
        f"{figures.full_refresh_build.seconds:.1f} s "
        f"({figures.full_refresh_build.cpu_seconds:.1f} CPU s), peak RSS "
        f"{figures.full_refresh_build.peak_rss_mib:.0f} MiB; the +1 build took "
        f"{figures.incremental_build.seconds / figures.full_refresh_build.seconds:.0%} of it"
    )
    if not figures.full_refresh_build.ok:
        figures.broke_at = f"dbt build --full-refresh: {figures.full_refresh_build.error}"
    return figures


def report(all_figures: list[RunFigures]) -> str:
    """The figures as a plain-text table plus per-run details."""
    lines = [
        f"{'run':<16} {'ranks':>5} {'it':>2} {'load':>9} {'sim s':>6} {'ingest s':>8} "
        f"{'build s/cpu':>11} {'RSS MiB':>7} {'fct_kernels':>12} {'merge rows/s':>12} "
        f"{'sweep rows/s':>12} {'+1 ingest s':>11} {'+1 build s/cpu':>14} {'+1 RSS MiB':>10} "
        f"{'refresh s/cpu':>13}",
    ]
    for f in all_figures:
        build, inc, refresh = f.build, f.incremental_build, f.full_refresh_build
        lines.append(
            f"{f'tp{f.tp}_pp{f.pp}_dp{f.dp}':<16} {f.world:>5} {f.iterations:>2} "
            f"{f'{f.load_before:.1f}-{f.load_after:.1f}':>9} "
            f"{f.simulate_seconds:>6.1f} {f.ingest_seconds:>8.1f} "
            f"{(f'{build.seconds:.0f}/{build.cpu_seconds:.0f}' if build else '-'):>11} "
            f"{(f'{build.peak_rss_mib:.0f}' if build else '-'):>7} "
            f"{f.rows.get('fct_kernels', 0):>12,} "
            f"{f.rows_per_second.get('int_kernel_intervals_merged', 0):>12,.0f} "
            f"{f.rows_per_second.get('int_rank_iterations_swept', 0):>12,.0f} "
            f"{(f'{f.incremental_ingest_seconds:.1f}' if inc else '-'):>11} "
            f"{(f'{inc.seconds:.0f}/{inc.cpu_seconds:.0f}' if inc else '-'):>14} "
            f"{(f'{inc.peak_rss_mib:.0f}' if inc else '-'):>10} "
            f"{(f'{refresh.seconds:.0f}/{refresh.cpu_seconds:.0f}' if refresh else '-'):>13}"
        )
    for f in all_figures:
        lines.append(f"\ntp{f.tp}_pp{f.pp}_dp{f.dp} x {f.iterations} iterations:")
        if f.broke_at:
            lines.append(f"  BROKE at {f.broke_at}")
        if f.cold_parse and f.build:
            lines.append(
                f"  `dbt parse` alone, empty parse cache: {f.cold_parse.seconds:.1f} s (start-up "
                f"included; the full build below reuses its parse, as every build after the "
                f"first from a checkout does)"
            )
        if f.build and f.unchanged_build:
            lines.append(
                f"  nothing changed: {f.unchanged_build.seconds:.1f} s = "
                f"{f.unchanged_build.seconds / f.build.seconds:.0%} of the full build"
            )
        if f.incremental_build and f.full_refresh_build:
            lines.append(
                f"  +1 iteration: {f.incremental_build.seconds:.1f} s = "
                f"{f.incremental_build.seconds / f.full_refresh_build.seconds:.0%} of a full "
                f"build of all {f.iterations + 1} iterations"
                f"{' (REFRESHED EVERYTHING)' if f.incremental_build.refreshed_everything else ''}"
            )
        if f.baseline_build and f.build:
            base = f.baseline_build
            lines.append(
                f"  baseline project: full {base.seconds:.1f} s / {base.peak_rss_mib:.0f} MiB "
                f"(this one {f.build.seconds:.1f} s / {f.build.peak_rss_mib:.0f} MiB: "
                f"{base.seconds / f.build.seconds:.2f}x faster)"
                + (f"; nothing changed {f.baseline_unchanged_build.seconds:.1f} s"
                   if f.baseline_unchanged_build else "")
                + (f"; +1 iteration {f.baseline_incremental_build.seconds:.1f} s"
                   if f.baseline_incremental_build else "")
            )
        builds = (
            ("full build", f.build),
            ("incremental build", f.incremental_build),
            ("full refresh after +1", f.full_refresh_build),
        )
        for label, build in builds:
            if build and build.model_seconds:
                slowest = ", ".join(f"{name} {s:.1f}" for name, s in build.slowest)
                lines.append(f"  {label}: slowest models (s): {slowest}")
                chain = ", ".join(
                    f"{m} {build.model_seconds[m]:.1f}"
                    for m in (
                        "int_slices_contextualized",
                        "int_kernels_classified",
                        "int_kernel_intervals_merged",
                        "int_rank_iterations_swept",
                        "fct_rank_iterations",
                        "fct_kernel_summary",
                    )
                    if m in build.model_seconds
                )
                lines.append(f"  {label}: kernel chain (s): {chain}")
                if build.statement_seconds:
                    lines.append(f"  {label}: SQL by statement kind, summed over threads "
                                 f"(count): {describe(build.statement_seconds)}")
                mine = {m: build.model_seconds[m] for m in DISTRIBUTED_MODELS
                        if m in build.model_seconds}
                if mine:
                    total = sum(mine.values())
                    share = total / build.seconds if build.seconds else 0.0
                    lines.append(
                        f"  {label}: distributed models {total:.1f} s ({share:.0%} of the "
                        "build): " + ", ".join(f"{m} {t:.1f}" for m, t in mine.items()))
        if f.rows:
            lines.append(
                "  rows: "
                + ", ".join(f"{t} {n:,}" for t, n in f.rows.items())
                + f"; database {f.database_mib:.0f} MiB"
            )
        if f.incremental_rows:
            lines.append(
                "  rows after +1 iteration: "
                + ", ".join(f"{t} {n:,}" for t, n in f.incremental_rows.items())
            )
    return "\n".join(lines)


def _write_json(path: Path, all_figures: list[RunFigures]) -> None:
    """Every figure so far, with the machine, as JSON."""
    payload: dict[str, Any] = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "runs": [asdict(f) for f in all_figures],
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure the base run (and the ``--scale`` ladder), print figures."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_build"]:
        return _child_build(argv[1], int(argv[2]), argv[3], argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--pp", type=int, default=8)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument(
        "--iterations",
        type=int,
        default=2,
        help="iterations built first; one more is added for the incremental build",
    )
    parser.add_argument(
        "-j", "--jobs", type=int, default=2, help="processes for simulate and ingest (default 2)"
    )
    parser.add_argument(
        "--cores", type=int, default=2, help="CPUs the dbt build child is pinned to (default 2)"
    )
    parser.add_argument(
        "--memory-limit",
        default="",
        help="DuckDB memory_limit for the builds, e.g. 8GB (default: profiles.yml's, 60%% of RAM)",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="then try bigger runs (512, 1024 ranks; 4, 8 iterations) until one breaks",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds one dbt build may take before it counts as broken",
    )
    parser.add_argument(
        "--baseline-project",
        type=Path,
        help="another checkout of the dbt project to time on the same lake (e.g. the previous "
        "commit, via git worktree add)",
    )
    parser.add_argument(
        "--debug-log",
        action="store_true",
        help="write dbt's file log at debug level (DBT_LOG_LEVEL_FILE=debug), as the "
        "'SQL by statement kind' line needs; it costs the build ~11%% of a small build's "
        "CPU, so the build figures are then not those of a plain tracehouse build",
    )
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--tmp", type=Path, help="scratch folder (default: a new temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="tracehouse-models-bench-", dir=args.tmp))
    # Build children inherit this: no build depends on the user's parse cache.
    os.environ["TRACEHOUSE_CACHE_DIR"] = str(scratch / "dbt-parse-cache")
    if args.debug_log:
        os.environ["DBT_LOG_LEVEL_FILE"] = "debug"
    configs = [(args.tp, args.pp, args.dp, args.iterations)]
    if args.scale:
        configs += [c for c in SCALE_LADDER if c != configs[0]]
    all_figures: list[RunFigures] = []
    try:
        for tp, pp, dp, iterations in configs:
            figures = measure(args, tp, pp, dp, iterations, scratch)
            figures.load_after = os.getloadavg()[0]
            all_figures.append(figures)
            # Print and save as each run ends: a --scale ladder may be stopped
            # by hand long before it breaks.
            print(report([figures]), flush=True)
            if args.json:
                _write_json(args.json, all_figures)
            if not args.keep:
                shutil.rmtree(scratch / f"tp{tp}_pp{pp}_dp{dp}_it{iterations}", ignore_errors=True)
            if figures.broke_at:
                _say(f"broke: {figures.broke_at}")
                break
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            _say(f"kept {scratch}")
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    )
    print("\nall runs:")
    print(report(all_figures))
    return 1 if any(f.broke_at for f in all_figures) and not args.scale else 0


if __name__ == "__main__":
    sys.exit(main())
