#!/usr/bin/env python3
"""Make a large Nsight Systems export from a small real one by repeating it in time.

Why: the shared exports are 2-3 MB, while a real multi-GPU capture (the
nsys-ai seed's Megatron example) is ~700 MB; fixed costs hide what grows
with the file. Repeating a real capture keeps its real mix of kernels,
names, streams, CUDA calls and NVTX nesting.

How: the export is copied (schema, strings, processes, GPU info: the
parts that do not grow with time), then every activity table gets
``factor - 1`` more copies of its original rows, each shifted by the
capture's span (plus a 1 ms gap), with correlation ids shifted past the
largest one in any table so that each launch still pairs with its own GPU
work. String ids, processes and threads are kept, so names resolve as in
the original. NVTX domain-create records (one per domain in a real capture)
are not repeated. Rows are copied by SQLite itself (``insert ... select``
from the attached original), never held in Python, so the generator runs
in a few MB whatever the output size.

    python benchmarks/nsys_scale.py SRC OUT --factor K
    python benchmarks/nsys_scale.py SRC OUT --size-mb 700
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
from pathlib import Path

#: Activity tables repeated in time (those present in the export).
SCALED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                 "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME",
                 "CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                 "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
#: NVTX_EVENTS.eventType of a domain create: once per capture, not per repeat.
NVTX_DOMAIN_CREATE = 75
GAP_NS = 1_000_000


def _tables(con: sqlite3.Connection, schema: str) -> list[str]:
    names = {row[0] for row in con.execute(
        f"select name from {schema}.sqlite_master where type = 'table'")}
    return [t for t in SCALED_TABLES if t in names]


def _columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [row[1] for row in con.execute(f"pragma {schema}.table_info('{table}')")]


def scale_export(src: Path, out: Path, factor: int) -> Path:
    """Write ``out``: ``src`` with its activity repeated ``factor`` times back to back."""
    if factor < 1:
        raise ValueError("factor must be >= 1")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, out)
    out.chmod(0o644)
    con = sqlite3.connect(out, isolation_level=None)
    try:
        con.execute("pragma journal_mode = off")
        con.execute("pragma synchronous = off")
        con.execute("attach database ? as src", (f"{src.resolve().as_uri()}?mode=ro",))
        tables = _tables(con, "src")
        first, last, top = None, None, 0
        for table in tables:
            columns = _columns(con, "src", table)
            (lo, hi), = con.execute(
                f'select min(start), max(coalesce("end", start)) from src."{table}"').fetchall()
            if lo is not None:
                first = lo if first is None else min(first, lo)
                last = hi if last is None else max(last, hi)
            if "correlationId" in columns:
                (most,), = con.execute(f'select max(correlationId) from src."{table}"').fetchall()
                top = max(top, most or 0)
        if first is None:
            return out
        shift, corr_shift = last - first + GAP_NS, top + 1
        con.execute("begin")
        for table in tables:
            columns = _columns(con, "src", table)
            where = (f"where eventType is not {NVTX_DOMAIN_CREATE}"
                     if table == "NVTX_EVENTS" and "eventType" in columns else "")
            names = ", ".join(f'"{c}"' for c in columns)
            for k in range(1, factor):
                select = ", ".join(
                    f'"{c}" + {k * shift}' if c in ("start", "end")
                    else f'"{c}" + {k * corr_shift}' if c == "correlationId"
                    else f'"{c}"' for c in columns)
                con.execute(f'insert into main."{table}" ({names}) '
                            f'select {select} from src."{table}" {where}')
        con.execute("commit")
    finally:
        con.close()
    return out


def factor_for_size(src: Path, size_mb: float, scratch: Path) -> int:
    """The smallest factor whose output reaches ``size_mb`` (10^6 bytes), from a 2× trial."""
    trial = scale_export(src, scratch / f".{src.stem}_trial.sqlite", 2)
    try:
        fixed = src.stat().st_size
        per_copy = max(trial.stat().st_size - fixed, 1)
    finally:
        trial.unlink()
    base = fixed - per_copy
    return max(1, -(-int(size_mb * 1e6 - base) // per_copy))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--factor", type=int)
    group.add_argument("--size-mb", type=float, help="smallest factor giving this size")
    args = parser.parse_args(argv)
    factor = args.factor or factor_for_size(args.src, args.size_mb, args.out.parent)
    scale_export(args.src, args.out, factor)
    print(f"{args.out}: x{factor}, {args.out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
