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
printed by the child on stderr as it finishes each step.
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


def instrument() -> None:
    """Wrap the Nsight loader's steps where their callers look them up."""
    from tracehouse.ingest import slice_context
    from tracehouse.ingest.nsys import parse, ranges, write

    parse.read_shared = phase("read shared", parse.read_shared)
    parse.read_gpu = phase("read gpu", parse.read_gpu)
    parse._sorted_rows = phase("sort gpu (duckdb)", parse._sorted_rows)  # noqa: SLF001
    parse.slice_names = phase("slice names", parse.slice_names)
    parse._one_gpu = phase("map gpu (arrays)", parse._one_gpu)  # noqa: SLF001
    write.with_context = phase("slice context", slice_context.with_context)
    write.write_ranges_tmp = phase("annotation ranges", ranges.write_ranges_tmp)
    write._write_slices = phase("write slices", write._write_slices)  # noqa: SLF001
    write.write_gpu_tmp = phase("gpu total (write)", write.write_gpu_tmp)


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
