#!/usr/bin/env python3
"""Spark benchmark: the same dbt build on DuckDB and on Spark, 64 ranks upwards.

One command, prints one line per run size and the growth between sizes:

1. simulate a Megatron-LM run (TP4 x PP4 x DP = world/16, ``--microbatches``,
   ``--iterations``) with ``tracehouse simulate``;
2. ingest it into a fresh warehouse (``-j --jobs``);
3. ``tracehouse build`` (DuckDB) and ``tracehouse build --target spark``
   (local Spark, ``TRACEHOUSE_SPARK_MASTER``, default ``local[2]``), each in
   a child process: wall time and the peak of the summed RSS of the child's
   whole process tree (sampled every 0.2 s; for Spark that is the Python
   driver plus the JVM, which ``ru_maxrss`` of one process would miss);
4. compare the marts of the two builds row for row
   (``compare_marts`` in tests/spark_marts.py).

Sizes: ``--ranks 64 256 1024`` (default); a size whose simulation, ingest or
either build fails or passes ``--timeout`` is reported and ends the ladder.
The ratio printed is Spark / DuckDB for the same lake in the same run; the
growth is how each engine's time and memory scale from one size to the
next (exponent k in time ~ ranks^k).

    python benchmarks/spark.py [--ranks 64 256 1024] [--microbatches 4]
                               [--iterations 1] [--jobs 2] [--timeout S]
                               [--json OUT] [--tmp DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
TRACEHOUSE = str(Path(sys.executable).parent / "tracehouse")


@dataclass
class Step:
    """One timed child process."""

    ok: bool
    seconds: float
    peak_mib: float
    note: str = ""


@dataclass
class Size:
    """Every figure of one run size."""

    ranks: int
    events: int = 0
    lake_mib: float = 0.0
    ingest: Step | None = None
    duckdb: Step | None = None
    spark: Step | None = None
    marts_equal: bool | None = None
    differences: list[str] | None = None


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def timed(argv: list[str], env: dict[str, str], timeout: float, log: Path) -> Step:
    """Run ``argv``; wall time and the peak RSS of its process tree."""
    began = time.perf_counter()
    peak = 0
    with open(log, "w") as out:
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        while child.poll() is None:
            peak = max(peak, _tree_rss(child.pid))
            if time.perf_counter() - began > timeout:
                os.killpg(child.pid, 9)
                child.wait()
                return Step(False, time.perf_counter() - began, peak / MIB,
                            f"timed out after {timeout:.0f} s")
            time.sleep(0.2)
    seconds = time.perf_counter() - began
    ok = child.returncode == 0
    return Step(ok, seconds, peak / MIB, "" if ok else f"exit {child.returncode}; see {log}")


def measure(ranks: int, args: argparse.Namespace, scratch: Path) -> Size:
    size = Size(ranks)
    dp = max(1, ranks // 16)
    sim = scratch / f"sim_{ranks}"
    wh = scratch / f"wh_{ranks}"
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
           "TRACEHOUSE_SPARK_DRIVER_MEMORY": args.driver_memory}
    env.pop("TRACEHOUSE_WAREHOUSE", None)
    step = timed([TRACEHOUSE, "simulate", "--tp", "4", "--pp", "4", "--dp", str(dp),
                  "--microbatches", str(args.microbatches), "--iterations",
                  str(args.iterations), "--out", str(sim)], env, args.timeout,
                 scratch / f"simulate_{ranks}.log")
    if not step.ok:
        size.ingest = step
        return size
    size.ingest = timed([TRACEHOUSE, "ingest", str(sim), "--warehouse", str(wh), "-q",
                         "-j", str(args.jobs)], env, args.timeout, scratch / f"ingest_{ranks}.log")
    if not size.ingest.ok:
        return size
    size.lake_mib = sum(p.stat().st_size for p in (wh / "lake").rglob("*.parquet")) / MIB
    import duckdb

    con = duckdb.connect()
    size.events = con.execute(
        "select coalesce(sum(event_count), 0) from read_parquet(?)",
        [str(wh / "lake" / "traces" / "**" / "*.parquet")]).fetchone()[0]
    con.close()
    size.duckdb = timed([TRACEHOUSE, "build", "--warehouse", str(wh)], env, args.timeout,
                        scratch / f"duckdb_{ranks}.log")
    size.spark = timed([TRACEHOUSE, "build", "--warehouse", str(wh), "--target", "spark"],
                       env, args.timeout, scratch / f"spark_{ranks}.log")
    if size.duckdb.ok and size.spark.ok:
        sys.path.insert(0, str(REPO / "tests"))  # the comparison is test code, not shipped
        from spark_marts import compare_marts

        differences = compare_marts(wh)
        size.marts_equal = not differences
        size.differences = [d.line() for d in differences]
    return size


def growth(a: float, b: float, ra: int, rb: int) -> str:
    if a <= 0 or b <= 0:
        return "   -"
    return f"{math.log(b / a) / math.log(rb / ra):4.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g",
                        help="spark.driver.memory of the Spark build (local mode: all of Spark)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds per step before the ladder stops")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--tmp", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="tracehouse-spark-bench-", dir=args.tmp))
    print(f"# {platform.node()}: {os.cpu_count()} CPUs; scratch {scratch}", flush=True)
    print(f"{'ranks':>6} {'events':>11} {'lake MiB':>9} {'duckdb s':>9} {'MiB':>7} "
          f"{'spark s':>9} {'MiB':>7} {'time x':>7} {'mem x':>6}  equal", flush=True)
    sizes: list[Size] = []
    try:
        for ranks in args.ranks:
            size = measure(ranks, args, scratch)
            sizes.append(size)
            d, s = size.duckdb, size.spark
            if d is None or s is None:
                why = size.ingest.note if size.ingest else ""
                print(f"{ranks:>6} failed before the builds: {why}")
                break
            print(f"{ranks:>6} {size.events:>11,} {size.lake_mib:>9.1f} {d.seconds:>9.1f} "
                  f"{d.peak_mib:>7.0f} {s.seconds:>9.1f} {s.peak_mib:>7.0f} "
                  f"{s.seconds / d.seconds:>7.2f} {s.peak_mib / max(d.peak_mib, 1):>6.2f}  "
                  f"{size.marts_equal}{'' if d.ok and s.ok else ' ' + (d.note or s.note)}",
                  flush=True)
            for line in size.differences or []:
                print(f"       differs: {line}")
            if not (d.ok and s.ok):
                break
        done = [z for z in sizes if z.duckdb and z.spark and z.duckdb.ok and z.spark.ok]
        for a, b in zip(done, done[1:]):
            print(f"growth {a.ranks}->{b.ranks} ranks (k in cost ~ ranks^k): "
                  f"duckdb time {growth(a.duckdb.seconds, b.duckdb.seconds, a.ranks, b.ranks)} "
                  f"memory {growth(a.duckdb.peak_mib, b.duckdb.peak_mib, a.ranks, b.ranks)}; "
                  f"spark time {growth(a.spark.seconds, b.spark.seconds, a.ranks, b.ranks)} "
                  f"memory {growth(a.spark.peak_mib, b.spark.peak_mib, a.ranks, b.ranks)}")
        if args.json:
            args.json.write_text(json.dumps([asdict(z) for z in sizes], indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0 if sizes and all(z.marts_equal for z in sizes) else 1


if __name__ == "__main__":
    sys.exit(main())
