#!/usr/bin/env python3
"""CPU seconds and memory of each phase of one Nsight export's ingest, in one process.

Why: ``/usr/bin/time`` gives a command's peak and total, not which step of
the load made them. This runs ``tracehouse ingest``'s own path
(:func:`tracehouse.ingest.runner.ingest_paths`, one job) into a fresh
warehouse with the Nsight loader's steps wrapped, and prints per step its
CPU seconds (this process and, where a GPU is loaded in a child process,
the children's), the RSS after it, and the peak RSS while it ran (``VmHWM``,
reset before each step through ``/proc/self/clear_refs`` where the kernel
allows it, else the peak since the start):

    python benchmarks/nsys_phases.py FILE [--keep DIR]

Steps that run in a child process report from there (one line per GPU),
printed by the child on stderr as it finishes each step. The streaming
loader's per-batch steps (the row id range reads, names and args, nesting,
context, ranges, spills, Parquet writes) are summed per pass and printed
under it, with their number of calls.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _cpu() -> float:
    usage = os.times()
    return usage.user + usage.system


def phase(name: str, fn):
    """``fn`` wrapped to print its CPU seconds, RSS after and peak RSS while it ran."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        reset = _reset_peak()
        cpu, wall = _cpu(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            print(f"[pid {os.getpid()}] {name:<22} cpu {_cpu() - cpu:7.2f} s  "
                  f"wall {time.perf_counter() - wall:7.2f} s  "
                  f"rss {_status_kib('VmRSS') / 1024:7.0f} MiB  "
                  f"peak{'' if reset else ' (since start)'} "
                  f"{_status_kib('VmHWM') / 1024:7.0f} MiB", file=sys.stderr, flush=True)
    return wrapped


#: Per-batch steps: their CPU seconds, wall seconds and calls, summed per process.
_TALLY: dict[str, list[float]] = {}


def tally(name: str, fn):
    """``fn`` wrapped to add its CPU and wall seconds to :data:`_TALLY` (steps run once
    per batch: one line each would be thousands)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        cpu, wall = _cpu(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = _TALLY.setdefault(name, [0.0, 0.0, 0])
            spent[0] += _cpu() - cpu
            spent[1] += time.perf_counter() - wall
            spent[2] += 1
    return wrapped


def _tallied(name: str, fn):
    """``fn`` as :func:`phase`, then the per-batch tallies made while it ran."""
    timed = phase(name, fn)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        _TALLY.clear()
        try:
            return timed(*args, **kwargs)
        finally:
            for step, (cpu, wall, calls) in sorted(_TALLY.items(), key=lambda kv: -kv[1][0]):
                print(f"[pid {os.getpid()}]   {step:<20} cpu {cpu:7.2f} s  wall {wall:7.2f} s"
                      f"  calls {calls}", file=sys.stderr, flush=True)
    return wrapped


def instrument() -> None:
    """Wrap the Nsight loader's steps where their callers look them up."""
    from tracehouse.ingest.nsys import fetch, parse, write
    from tracehouse.ingest.nsys.carry import OpenSlices

    parse.read_shared = phase("read shared", parse.read_shared)
    stream = write._GpuStream  # noqa: SLF001
    stream.__init__ = phase("gpu sides and tracks", stream.__init__)
    write.order_side = phase("side keys sorted", write.order_side)
    stream._cpu_pass = _tallied("cpu side", stream._cpu_pass)  # noqa: SLF001
    stream._gpu_pass = _tallied("device side", stream._gpu_pass)  # noqa: SLF001
    stream._replay = phase("spilled rows written", stream._replay)  # noqa: SLF001
    stream.run = phase("gpu total", stream.run)
    # Per batch: the row id range reads are timed as the iterator's steps.
    write.side_batches = _iterated("read (row id ranges)", fetch.side_batches)
    stream._batch = tally("names and args", stream._batch)  # noqa: SLF001
    OpenSlices.nest = tally("nesting", OpenSlices.nest)
    write.with_context = tally("slice context", write.with_context)
    write.annotation_ranges = tally("annotation ranges", write.annotation_ranges)
    stream._lake_rows = tally("lake columns", stream._lake_rows)  # noqa: SLF001
    stream._complete = tally("lake columns", stream._complete)  # noqa: SLF001
    from tracehouse.ingest.nsys import groups, spill
    groups.GroupedWriter._write = tally("parquet write", groups.GroupedWriter._write)  # noqa: SLF001
    spill.Spill.write = tally("spill write", spill.Spill.write)


def _iterated(name: str, fn):
    """A generator function whose every ``next`` is tallied under ``name``."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        items = fn(*args, **kwargs)
        step = tally(name, lambda: next(items, None))
        while (item := step()) is not None:
            yield item
    return wrapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--keep", type=Path, help="warehouse folder to keep (default: temporary)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    instrument()
    from tracehouse.ingest.runner import ingest_paths

    cpu, wall = _cpu(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nsys-phases-") as tmp:
        root = args.keep or Path(tmp)
        result = ingest_paths([args.file], warehouse=root, run="phases", jobs=1, progress=False)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"total: wall {time.perf_counter() - wall:.1f} s, cpu {_cpu() - cpu:.1f} s "
          f"(children {children.ru_utime + children.ru_stime:.1f} s), "
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB "
          f"(children {children.ru_maxrss / 1024:.0f} MiB), failed: {result.failed}",
          file=sys.stderr)
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
