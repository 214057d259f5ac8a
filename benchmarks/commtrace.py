#!/usr/bin/env python3
"""``tracehouse commtrace`` at scale: wall time and peak memory per layout.

Each layout is traced whole (every rank, a log per rank) into a temporary
folder with ``run_commtrace`` (a process pool as wide as ``--jobs``, one
forked worker per rank). Printed per layout: ranks, wall seconds, mean and
max seconds per rank, the peak RSS of any rank's worker (the memory bound:
at most ``jobs`` workers live at once), the parent's peak RSS, and events
logged. The peer is Genstack's tracer (seed 04), which is not runnable here
(a full Megatron-LM fork with a real gloo rendezvous per rank); its
documented limit is a stall beyond about 64 ranks on 8-16 cores, so the
ratio printed is against the 5-minute target of issue 13 for 48 ranks.

    python benchmarks/commtrace.py [--layout NAME ...] [--jobs N] [--keep DIR]

Layouts: ``genstack48`` (175b, TP4 x PP6 x DP2 = 48 ranks, Genstack's own
example), ``w128_175b`` (175b, TP8 x PP8 x DP2 = 128 ranks), ``small16``
(small, TP2 x PP4 x DP2).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracehouse.commtrace.run import CommTraceConfig, run_commtrace  # noqa: E402

LAYOUTS: dict[str, CommTraceConfig] = {
    "small16": CommTraceConfig(tp=2, pp=4, dp=2, model="small"),
    "genstack48": CommTraceConfig(tp=4, pp=6, dp=2, model="175b"),
    "w128_175b": CommTraceConfig(tp=8, pp=8, dp=2, model="175b"),
}
TARGET_48_S = 300.0


def measure(name: str, config: CommTraceConfig, jobs: int | None, keep: Path | None) -> dict:
    out = (keep / name) if keep else Path(tempfile.mkdtemp(prefix=f"commtrace_{name}_"))
    try:
        result = run_commtrace(config, out, jobs=jobs)
        per_rank = [outcome.seconds for outcome in result.ranks]
        return {
            "layout": name, "ranks": config.world, "jobs": result.jobs,
            "wall_s": round(result.seconds, 1),
            "mean_rank_s": round(sum(per_rank) / len(per_rank), 2),
            "max_rank_s": round(max(per_rank), 2),
            "peak_rank_rss_mib": round(result.peak_rss_bytes / 2**20),
            "parent_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "events": sum(outcome.events for outcome in result.ranks),
            "failed": len(result.failed),
            "log_mib": round(sum(p.stat().st_size for p in out.glob("comm_log_rank_*.json"))
                             / 2**20, 1),
        }
    finally:
        if keep is None:
            shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", action="append", choices=sorted(LAYOUTS))
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep the logs under DIR")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    for name in args.layout or ["genstack48", "w128_175b"]:
        row = measure(name, LAYOUTS[name], args.jobs, args.keep)
        if row["ranks"] == 48:
            row["share_of_5min_target"] = round(row["wall_s"] / TARGET_48_S, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if any(row["failed"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
