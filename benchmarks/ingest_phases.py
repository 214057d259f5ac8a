#!/usr/bin/env python3
"""CPU seconds of each phase of `tracehouse ingest`, per trace set, in one table.

Why: benchmarks/ingest.py times a whole load against HTA; choosing what to
make faster needs the split (gunzip, scan, nesting, flows, Parquet, ...) on
each kind of trace, and the fixed costs a load does not show (interpreter
start and imports, which both tools' "load s" leave out).

How: every named phase is a function the ingest path already calls; each is
wrapped, in its caller's module namespace, by a timer of this process's CPU
(``time.process_time``: user + system of every thread, Arrow's and zstd's
included), and a phase's time excludes the phases it calls. ``ingest_paths``
runs in process (``jobs=1``) on a fresh warehouse, best of ``--repeat``
rounds (the one with the least total CPU); what no phase claims is "runner,
rest". Process start and imports are measured in fresh interpreters, for
tracehouse as `tracehouse ingest` imports and for HTA as benchmarks/ingest.py
does.

    python benchmarks/ingest_phases.py PATH [PATH ...] [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

#: (module, attribute, phase): the functions timed, in the order phases are printed.
PHASES: list[tuple[str, str, str]] = [
    ("tracehouse.ingest.lake", "init_lake", "init lake"),
    ("tracehouse.ingest.runner", "read_trace_bytes", "read file"),
    ("tracehouse.ingest.kineto.read", "gunzip", "gunzip"),
    ("hashlib", "blake2b", "content hash"),
    ("tracehouse.ingest._kineto_scan", "scan", "scan (C)"),
    ("tracehouse.ingest.kineto.scan", "_header", "header"),
    ("tracehouse.ingest.kineto.scan", "_columns", "columns to Arrow"),
    ("tracehouse.ingest.kineto.native", "nest_slices", "nesting"),
    ("tracehouse.ingest.kineto.native", "_flows", "flows"),
    ("tracehouse.ingest.kineto.native", "_threads_and_processes", "threads, processes"),
    ("tracehouse.ingest.kineto.native", "process_groups", "process groups"),
    ("tracehouse.ingest.kineto.native", "has_op_shapes", "op shapes"),
    ("tracehouse.ingest.runner", "parse_kineto", "parse, rest"),
    ("tracehouse.ingest.lake", "with_context", "slice context"),
    ("tracehouse.ingest.lake", "annotation_ranges", "annotation ranges"),
    ("tracehouse.ingest.lake", "write_parquet_tmp", "Parquet write"),
    ("tracehouse.ingest.lake", "commit", "commit"),
]
REST = "runner, rest"


class PhaseClock:
    """Exclusive CPU seconds per phase: a phase's time excludes the phases it calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # [started, time of timed callees]

    def wrap(self, phase: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            frame = [time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.process_time() - frame[0]
                self.seconds[phase] += spent - frame[1]
                if self._stack:
                    self._stack[-1][1] += spent

        return timed


def install(clock: PhaseClock) -> None:
    import importlib

    for module, attr, phase in PHASES:
        mod = importlib.import_module(module)
        setattr(mod, attr, clock.wrap(phase, getattr(mod, attr)))


def measure(files: list[Path], repeat: int) -> dict[str, float]:
    """The phases of the round with the least total CPU."""
    from tracehouse.ingest import runner

    best: dict[str, float] | None = None
    for _ in range(repeat):
        clock = PhaseClock()
        install(clock)
        with tempfile.TemporaryDirectory(prefix="phases-") as tmp:
            cpu0 = time.process_time()
            res = runner.ingest_paths(files, Path(tmp) / "wh", run=None, jobs=1, force=True,
                                      progress=False)
            total = time.process_time() - cpu0
        _uninstall()
        if res.failed or len(res.loaded) != len(files):
            raise SystemExit(f"ingest failed: {[f.line() for f in res.failed]}")
        seconds = dict(clock.seconds)
        seconds[REST] = total - sum(seconds.values())
        seconds["total"] = total
        if best is None or total < best["total"]:
            best = seconds
    assert best is not None
    return best


_ORIGINALS: dict[tuple[str, str], Callable] = {}


def _uninstall() -> None:
    import importlib

    for (module, attr), fn in _ORIGINALS.items():
        setattr(importlib.import_module(module), attr, fn)


def _remember() -> None:
    import importlib

    for module, attr, _ in PHASES:
        _ORIGINALS[(module, attr)] = getattr(importlib.import_module(module), attr)


#: What each tool imports before its timed load (as benchmarks/ingest.py's children do).
STARTS = {
    "python -c pass": "pass",
    "tracehouse imports": ("from tracehouse.ingest.no_pandas import keep_pandas_out; "
                           "keep_pandas_out(); from tracehouse.ingest.runner import ingest_paths"),
    "+ what an ingest imports later": (
        "from tracehouse.ingest.no_pandas import keep_pandas_out; keep_pandas_out(); "
        "from tracehouse.ingest.runner import ingest_paths; "
        "import tracehouse.ingest.kineto.scan, pyarrow.parquet"),
    "HTA imports": "from hta.trace_analysis import TraceAnalysis",
}


def start_costs(repeat: int) -> dict[str, float]:
    """Median CPU seconds of a fresh interpreter that imports what each tool's child does."""
    out = {}
    for label, code in STARTS.items():
        times = []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run([sys.executable, "-c", code], capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode:
                times = []
                break
            times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        out[label] = sorted(times)[len(times) // 2] if times else float("nan")
    return out


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.name.endswith((".json", ".json.gz"))
                  and p.name != "topology.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from tracehouse.ingest.no_pandas import keep_pandas_out

    keep_pandas_out()
    _remember()
    results = {str(p): measure(_files(p), args.repeat) for p in args.paths}
    starts = start_costs(args.repeat)
    phases = [phase for _, _, phase in PHASES] + [REST, "total"]
    names = [p.name for p in args.paths]
    print("| phase (CPU ms) | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for phase in phases:
        cells = [f"{results[str(p)].get(phase, 0.0) * 1e3:.1f}" for p in args.paths]
        print(f"| {phase} | " + " | ".join(cells) + " |")
    for label, seconds in starts.items():
        print(f"{label}: {seconds * 1e3:.0f} ms CPU (median of {args.repeat})")
    if args.json:
        args.json.write_text(json.dumps({"phases": results, "starts": starts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
