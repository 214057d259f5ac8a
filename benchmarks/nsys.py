#!/usr/bin/env python3
"""Nsight Systems benchmark: tracehouse ingest vs nsys-ai's own load of the same export.

For every export, in the same run, each in its own fresh child process (so
peak RSS is that measurement's own ``ru_maxrss``), this times

* ``tracehouse-ingest``: ``ingest_paths([file])`` into a fresh warehouse
  (ADBC read, mapping to lake rows, Parquet written, committed);
* ``tracehouse-views``: the same ingest, then the nsys marts built
  (``build_marts``) and the summary, overlap and nccl views queried: what
  ``tracehouse nsys summary|overlap|nccl`` does;
* ``nsys-ai``: ``nsys_ai.profile.open(file)`` and its ``gpu_summary``,
  ``overlap_analysis`` and ``nccl_breakdown`` for every GPU. Offline its
  DuckDB path needs the sqlite extension, which cannot be downloaded, so it
  runs on its sqlite3 fallback (as on any machine without the extension).
  It reads a copy in a temporary folder, because it writes a cache and a
  lock file beside the profile.

MB/s is the export's size on disk (10^6 bytes) over the median wall time.
The shared exports are small (2-3 MB), so fixed costs dominate; ``--scale K``
also measures a copy of each made K times longer (every kernel, copy, fill,
CUDA call and NVTX event repeated K times, shifted by the capture's length,
correlation ids kept apart), written once to a temporary folder.

    python benchmarks/nsys.py [FILE ...] [--repeat R] [--scale K] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NSYS = REPO.parent / "shared" / "data" / "nsys"
DEFAULT_FILES = [NSYS / "mfu_2gpu_before.sqlite", NSYS / "h100_2gpu_1s.sqlite"]
SIDES = ("tracehouse-ingest", "tracehouse-views", "nsys-ai")
MARK = "@@NSYS-BENCH@@ "


_SCALED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def scaled_copy(file: Path, factor: int, folder: Path) -> Path:
    """A copy of ``file`` with its activity repeated ``factor`` times back to back."""
    out = folder / f"{file.stem}_x{factor}.sqlite"
    shutil.copyfile(file, out)
    out.chmod(0o644)
    with sqlite3.connect(out) as con:
        (first, last), = con.execute(
            'select min(start), max("end") from CUPTI_ACTIVITY_KIND_KERNEL').fetchall()
        (top,), = con.execute(
            "select max(correlationId) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchall()
        shift, corr_shift = last - first + 1_000_000, (top or 0) + 1
        for table in _SCALED_TABLES:
            columns = [row[1] for row in con.execute(f"pragma table_info('{table}')")]
            (rows,), = con.execute(f"select count(*) from {table}").fetchall()
            for k in range(1, factor):
                select = ", ".join(
                    f'"{c}" + {k * shift}' if c in ("start", "end")
                    else f'"{c}" + {k * corr_shift}' if c == "correlationId"
                    else f'"{c}"' for c in columns)
                con.execute(f"insert into {table} select {select} from {table} "
                            f"where rowid <= {rows}")
    return out


def _child(side: str, file: Path, tmp: Path) -> dict[str, float]:
    """One measurement in this (fresh) process; returns seconds and peak RSS (MiB)."""
    if side == "nsys-ai":
        from nsys_ai import parquet_cache, profile
        from nsys_ai.overlap import nccl_breakdown, overlap_analysis
        from nsys_ai.summary import gpu_summary

        def offline(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("DuckDB sqlite extension not available offline")

        parquet_cache.open_auto_db = offline
        parquet_cache.open_direct_sqlite = offline
        copy = tmp / file.name
        shutil.copyfile(file, copy)
        started = time.perf_counter()
        with profile.open(str(copy)) as prof:
            for device in prof.meta.devices:
                gpu_summary(prof, device)
                overlap_analysis(prof, device)
                nccl_breakdown(prof, device)
    else:
        from tracehouse.ingest.runner import ingest_paths
        from tracehouse.nsys_cli import build_marts, ingest_file, query_view

        started = time.perf_counter()
        if side == "tracehouse-ingest":
            result = ingest_paths([file], warehouse=tmp / "wh", run="bench", jobs=1,
                                  progress=False)
            if result.failed:
                raise SystemExit(f"ingest failed: {result.failed}")
        else:
            trace_ids = ingest_file(file, tmp / "wh")
            build_marts(tmp / "wh")
            for view in ("summary", "overlap", "nccl"):
                query_view(tmp / "wh", view, trace_ids)
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mib": peak_mib}


def measure(side: str, file: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="nsys-bench-") as tmp:
        done = subprocess.run([sys.executable, __file__, "_child", side, str(file), tmp],
                              capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{side} on {file} failed:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1][len(MARK):])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        print(MARK + json.dumps(_child(argv[1], Path(argv[2]), Path(argv[3]))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=int, default=0, metavar="K",
                        help="also measure each export made K times longer")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    scratch = tempfile.TemporaryDirectory(prefix="nsys-bench-scaled-")
    files = list(args.files)
    if args.scale > 1:
        files += [scaled_copy(file, args.scale, Path(scratch.name)) for file in args.files]
    rows = []
    print(f"{'file':<30} {'side':<18} {'MB':>6} {'median s':>9} {'MB/s':>7} {'peak RSS MiB':>13}")
    for file in files:
        size_mb = file.stat().st_size / 1e6
        for side in SIDES:
            runs = [measure(side, file) for _ in range(args.repeat)]
            seconds = statistics.median(run["seconds"] for run in runs)
            peak = max(run["peak_rss_mib"] for run in runs)
            rows.append({"file": file.name, "side": side, "size_mb": size_mb,
                         "median_seconds": seconds, "mb_per_s": size_mb / seconds,
                         "peak_rss_mib": peak, "runs": runs})
            print(f"{file.name:<30} {side:<18} {size_mb:>6.2f} {seconds:>9.3f} "
                  f"{size_mb / seconds:>7.2f} {peak:>13.0f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
