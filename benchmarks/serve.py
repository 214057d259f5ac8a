#!/usr/bin/env python3
"""Viewer benchmark: ``tracehouse serve`` on a simulated Megatron-LM run, first view and clicks.

One command, prints figures (benchmarks/README.md says what each means):

1. simulate a run (default TP4 x PP8 x DP32 = 1,024 ranks, 16 microbatches,
   4 iterations; ``--quick``: TP2 x PP4 x DP4 = 32 ranks, 8 microbatches, 2
   iterations) with ``tracehouse simulate``'s library call, ingest it and
   build the warehouse (or take ``--warehouse DIR``, built already);
2. start ``tracehouse serve --port 0`` as a child process, as a user does,
   and time the first view: process start to listening, then the run
   overview's requests (the page, ``runs``, ``overview``, ``heatmap``);
3. time each interaction ``--repeat`` times: drill-in (iteration, rank's
   iteration, its kernels, one kernel, another heatmap part) and the
   timeline of a pipeline group, a model replica and every rank: the
   selection's first view (once: it reads ``fct_kernels`` and fills the
   viewer's cache), then open an iteration, zoom in step by step to 1/64 of
   it, pan.

Server-side time is the ``Server-Timing`` header the viewer sends (its
queries and the JSON encoding); wall time adds HTTP on the loopback and
reading the answer. The goal is under 200 ms server-side per interaction.

    python benchmarks/serve.py [--quick | --tp 4 --pp 8 --dp 32 --microbatches 16
                                --iterations 4] [--warehouse DIR] [--repeat 5]
                               [-j 2] [--json OUT] [--tmp DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parents[1]
#: The goal per interaction, server-side.
GOAL_MS = 200.0


@dataclass
class Timing:
    """One interaction measured ``repeat`` times: server-side and wall milliseconds."""

    name: str
    server_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    answer_kb: float = 0.0
    note: str = ""

    def row(self) -> str:
        median = statistics.median(self.server_ms)
        mark = "" if max(self.server_ms) < GOAL_MS else "  > goal"
        return (f"| {self.name} | {median:.1f} | {max(self.server_ms):.1f} | "
                f"{statistics.median(self.wall_ms):.1f} | {self.answer_kb:,.0f} | "
                f"{self.note}{mark} |")


@dataclass
class Figures:
    """Everything one run of the benchmark measured."""

    layout: str
    ranks: int
    iterations: int
    kernels: int = 0
    simulate_s: float | None = None
    ingest_s: float | None = None
    build_s: float | None = None
    start_s: float = 0.0
    first_view_ms: float = 0.0
    timings: list[Timing] = field(default_factory=list)


class Client:
    """HTTP to the viewer, reading the server-side time from ``Server-Timing``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: Any) -> tuple[Any, float, float, int]:
        """(answer, server ms, wall ms, bytes) of one GET."""
        started = time.perf_counter()
        query = f"?{urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path.lstrip('/')}{query}", timeout=600) as answer:
            body = answer.read()
            timing = answer.headers.get("Server-Timing", "")
        wall = (time.perf_counter() - started) * 1e3
        match = re.search(r"dur=([0-9.]+)", timing)
        server = float(match.group(1)) if match else wall
        data = json.loads(body) if path.startswith("/api/") else body
        return data, server, wall, len(body)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def prepare(args: argparse.Namespace, scratch: Path, figures: Figures) -> Path:
    """Simulate, ingest and build a run into ``scratch`` (or return ``--warehouse``)."""
    if args.warehouse:
        return args.warehouse.resolve()
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import SimConfig, simulate_run

    config = SimConfig(tp=args.tp, pp=args.pp, dp=args.dp, microbatches=args.microbatches,
                       iterations=args.iterations, stragglers=((min(5, args.tp * args.pp *
                                                                    args.dp - 1), 1.3),))
    _say(f"simulating {figures.layout} ...")
    started = time.perf_counter()
    run = simulate_run(config, scratch / "run", jobs=args.jobs, progress=False)
    figures.simulate_s = time.perf_counter() - started
    _say(f"ingesting {run.events:,} events ...")
    warehouse = scratch / "warehouse"
    started = time.perf_counter()
    result = ingest_paths([run.out_dir], warehouse=warehouse, run="bench", jobs=args.jobs,
                          progress=False)
    figures.ingest_s = time.perf_counter() - started
    if result.failed:
        raise SystemExit(f"ingest failed: {result.failed[:3]}")
    _say("building ...")
    started = time.perf_counter()
    build_warehouse(warehouse, ["--quiet"])
    figures.build_s = time.perf_counter() - started
    return warehouse


def start_server(warehouse: Path) -> tuple[subprocess.Popen, str, float]:
    """``tracehouse serve --port 0`` as a child; its URL and seconds to listening."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "tracehouse.cli", "serve", "--warehouse", str(warehouse),
         "--port", "0"], stderr=subprocess.PIPE, text=True, cwd=REPO)
    line = process.stderr.readline() if process.stderr else ""
    match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not match:
        process.kill()
        raise SystemExit(f"tracehouse serve did not start: {line}")
    return process, match.group(1), time.perf_counter() - started


def measure(client: Client, figures: Figures, repeat: int) -> None:
    """Time the first view, then each interaction ``repeat`` times."""
    started = time.perf_counter()
    client.get("/")
    runs, *_ = client.get("/api/runs")
    run = runs["runs"][0]["run_id"]
    client.get("/api/overview", run=run)
    client.get("/api/heatmap", run=run, part="step_ns")
    figures.first_view_ms = (time.perf_counter() - started) * 1e3

    choices, *_ = client.get("/api/timeline_choices", run=run)
    iterations = choices["iterations"]
    iteration = iterations[min(1, len(iterations) - 1)]
    rank = choices["ranks"][len(choices["ranks"]) // 2]
    kernels, *_ = client.get("/api/kernels", run=run, rank=rank, iteration=iteration["key"],
                             sort="dur_ns", desc=1)
    key = kernels["kernels"]["rows"][0]["key"]

    def timed(name: str, path: str, note: str = "", **params: Any) -> Timing:
        timing = Timing(name, note=note)
        for _ in range(repeat):
            _data, server, wall, size = client.get(path, **params)
            timing.server_ms.append(server)
            timing.wall_ms.append(wall)
            timing.answer_kb = size / 1024
        figures.timings.append(timing)
        _say(timing.row())
        return timing

    timed("overview", "/api/overview", run=run)
    timed("heatmap, another part", "/api/heatmap", run=run, part="step_idle_ns")
    timed("drill-in: an iteration's ranks", "/api/iteration", run=run,
          iteration=iteration["key"])
    timed("drill-in: a rank's iteration", "/api/rank_iteration", run=run, rank=rank,
          iteration=iteration["key"])
    timed("drill-in: its kernels (longest first)", "/api/kernels", run=run, rank=rank,
          iteration=iteration["key"], sort="dur_ns", desc=1)
    timed("kernels: filter by name", "/api/kernels", run=run, rank=rank,
          iteration=iteration["key"], q="nccl")
    timed("drill-in: one kernel", "/api/kernel", run=run, trace=key["trace_id"],
          slice=key["slice_id"])

    selections = [("pp group", {"group": "pp", "index": 0}),
                  ("replica", {"group": "replica", "index": 0}),
                  (f"all {len(choices['ranks'])} ranks",
                   {"ranks": f"{min(choices['ranks'])}-{max(choices['ranks'])}"})]
    for label, selection in selections:
        if "group" in selection and selection["group"] not in choices["groups"]:
            continue
        start, end = iteration["start"], iteration["end"]
        # The selection's first view reads fct_kernels (and, up to 64 ranks, fills the
        # viewer's cache); it is timed once, on its own, before the repeated interactions.
        shown, server, wall, size = client.get("/api/timeline", run=run, start=start,
                                               end=end, px=1200, **selection)
        first = Timing(f"timeline {label}: first view of the selection", [server], [wall],
                       size / 1024, f"{len(shown['lanes'])} lanes, " + _drawn(shown))
        figures.timings.append(first)
        _say(first.row())
        timed(f"timeline {label}: open an iteration again", "/api/timeline", run=run,
              start=start, end=end, px=1200, **selection)
        span = end - start
        for zoom in (4, 16, 64):
            middle = start + span // 2
            width = span // zoom
            timed(f"timeline {label}: zoom to 1/{zoom}", "/api/timeline", run=run,
                  start=middle - width // 2, end=middle + width // 2, px=1200, **selection)
        width = span // 16
        timed(f"timeline {label}: pan (1/16 view, 10% step)", "/api/timeline", run=run,
              start=start + span // 2 + width // 10, end=start + span // 2 + width // 10 + width,
              px=1200, **selection)


def _drawn(shown: dict[str, Any]) -> str:
    """What a timeline answer drew: busy cells (fct_rank_busy_buckets, zoomed out over many
    ranks) or slices out of how many."""
    rects = shown["rects"]
    if shown.get("mode") == "busy":
        return f"{len(rects['ts']):,} busy cells of {shown['step'] / 1e3:,.0f} us"
    return f"{len(rects['ts']):,} of {sum(rects['n']):,} slices drawn"


def describe(warehouse: Path, figures: Figures) -> None:
    """The run's size as the marts count it (read-only, before the viewer starts)."""
    import duckdb

    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.html import layout

    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        cursor = con.execute("select * from fct_run_summary order by ranks desc limit 1")
        run = dict(zip([column[0] for column in cursor.description], cursor.fetchone()))
        figures.ranks, figures.iterations = run["ranks"], run["iterations"]
        figures.layout = layout(run) or figures.layout
        figures.kernels = con.execute("select count(*) from fct_kernels").fetchone()[0]
    finally:
        con.close()


def report(figures: Figures) -> str:
    lines = [
        f"{figures.layout}: {figures.ranks:,} ranks x {figures.iterations} iterations, "
        f"{figures.kernels:,} kernels in fct_kernels",
        "",
    ]
    prepared = [(name, value) for name, value in (("simulate", figures.simulate_s),
                                                 ("ingest", figures.ingest_s),
                                                 ("build", figures.build_s)) if value is not None]
    if prepared:
        lines.append("prepared: " + ", ".join(f"{name} {value:.0f} s" for name, value in prepared))
    lines += [
        f"tracehouse serve: listening {figures.start_s:.2f} s after the process started; "
        f"first view (page, runs, overview, heatmap) {figures.first_view_ms:.0f} ms more",
        "",
        "| interaction | server ms (median) | server ms (max) | wall ms (median) | answer KiB | |",
        "|---|---|---|---|---|---|",
        *(timing.row() for timing in figures.timings),
    ]
    slow = [t.name for t in figures.timings if max(t.server_ms) >= GOAL_MS]
    lines.append("")
    lines.append(f"all under {GOAL_MS:.0f} ms server-side" if not slow
                 else f"over {GOAL_MS:.0f} ms server-side: {', '.join(slow)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--pp", type=int, default=8)
    parser.add_argument("--dp", type=int, default=32)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--quick", action="store_true",
                        help="TP2 x PP4 x DP4 (32 ranks), 8 microbatches, 2 iterations")
    parser.add_argument("--warehouse", type=Path,
                        help="a warehouse built already (skips simulate, ingest and build)")
    parser.add_argument("--repeat", type=int, default=5, help="times each interaction is timed")
    parser.add_argument("-j", "--jobs", type=int, default=2,
                        help="processes for simulate and ingest (default 2)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--tmp", type=Path, help="scratch folder (default: a new temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    if args.quick:
        args.tp, args.pp, args.dp, args.microbatches, args.iterations = 2, 4, 4, 8, 2

    scratch = Path(tempfile.mkdtemp(prefix="tracehouse-serve-bench-", dir=args.tmp))
    os.environ["TRACEHOUSE_CACHE_DIR"] = str(scratch / "dbt-parse-cache")
    figures = Figures(layout=f"TP{args.tp} x PP{args.pp} x DP{args.dp}",
                      ranks=args.tp * args.pp * args.dp, iterations=args.iterations)
    process = None
    try:
        warehouse = prepare(args, scratch, figures)
        describe(warehouse, figures)
        process, url, figures.start_s = start_server(warehouse)
        measure(Client(url), figures, args.repeat)
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        if args.keep:
            _say(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(report(figures))
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, python {platform.python_version()}")
    if args.json:
        args.json.write_text(json.dumps(asdict(figures), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
