"""Write small Nsight-Systems-shaped SQLite exports for tests, with sqlite3.

Real exports (../shared/data/nsys) have no iteration markers and no
overlapping NCCL; these files hold exactly such cases, with figures that
can be worked out by hand. Only the tables and columns ingest needs are
written, as an older nsys would: the reader must fill the rest with NULL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

PID, TID = 42, 43
GLOBAL_TID = (PID << 24) | TID
#: NVTX_EVENTS.eventType of a push/pop range.
PUSH_POP = 59

_SCHEMA = """
create table StringIds (id integer primary key, value text not null);
create table CUPTI_ACTIVITY_KIND_KERNEL (start integer, "end" integer, deviceId integer,
    streamId integer, correlationId integer, globalPid integer, demangledName integer,
    shortName integer);
create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer, "end" integer, globalTid integer,
    correlationId integer, nameId integer);
create table NVTX_EVENTS (start integer, "end" integer, eventType integer, text text,
    globalTid integer, textId integer, domainId integer);
"""


def write_export(path: Path, *, kernels: list[tuple[int, int, int, str, int]],
                 launches: list[tuple[int, int, int]],
                 ranges: list[tuple[int, int, str | bytes]]) -> Path:
    """An export of one GPU (device 0) and one thread (pid 42, tid 43).

    kernels: (start, end, stream, name, correlation); launches:
    (start, end, correlation) of cudaLaunchKernel calls; ranges: NVTX
    push/pop (start, end, text), text given as bytes is stored as TEXT
    unchecked (invalid UTF-8 stays invalid).
    """
    with sqlite3.connect(path) as con:
        con.executescript(_SCHEMA)
        names: dict[str, int] = {"cudaLaunchKernel_v7000": 1}
        for *_times, name, _c in kernels:
            names.setdefault(name, len(names) + 1)
        con.executemany("insert into StringIds values (?, ?)",
                        [(i, name) for name, i in names.items()])
        con.executemany(
            "insert into CUPTI_ACTIVITY_KIND_KERNEL values (?, ?, 0, ?, ?, ?, ?, ?)",
            [(start, end, stream, correlation, PID << 24, names[name], names[name])
             for start, end, stream, name, correlation in kernels])
        con.executemany("insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?, ?, ?, ?, 1)",
                        [(start, end, GLOBAL_TID, c) for start, end, c in launches])
        for start, end, text in ranges:
            con.execute("insert into NVTX_EVENTS values (?, ?, ?, ?, ?, null, 0)",
                        [start, end, PUSH_POP, text if isinstance(text, str) else None,
                         GLOBAL_TID])
            if isinstance(text, bytes):
                con.execute("update NVTX_EVENTS set text = cast(? as text) "
                            "where start = ? and \"end\" = ?", [text, start, end])
    return path


def write_two_step_export(path: Path, step_name: str = "ProfilerStep#{step}") -> Path:
    """Two step ranges (`ProfilerStep#N`, or ``step_name`` with N for {step}), each
    with a `forward` range launching a GEMM
    (stream 7, 100 us) and an NCCL all-reduce (stream 9, 100 us) that overlap
    by 50 us on the GPU. Per step: span 150 us, compute-only 50, NCCL-only 50,
    overlap 50. Whole capture: span 1150 us, compute-only 100, NCCL-only 100,
    overlap 100, idle 850."""
    kernels, launches, ranges = [], [], []
    for step in (1, 2):
        base = 1_000_000 * step
        ranges += [(base, base + 500_000, step_name.format(step=step)),
                   (base + 10_000, base + 200_000, "forward")]
        launches += [(base + 20_000, base + 21_000, 10 * step),
                     (base + 30_000, base + 31_000, 10 * step + 1)]
        kernels += [(base + 300_000, base + 400_000, 7, "gemm_kernel", 10 * step),
                    (base + 350_000, base + 450_000, 9,
                     "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10 * step + 1)]
    return write_export(path, kernels=kernels, launches=launches, ranges=ranges)


SCHEDULE = "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving"


def write_megatron_phases_export(path: Path) -> Path:
    """One profiler step as emit_nvtx names it, holding megatron-core's interleaved
    schedule ranges: warmup with a `chunk0 forward` (one 10 us kernel), steady
    with a `chunk0 backward` (one 20 us kernel)."""
    ranges = [(0, 100_000, "ProfilerStep#7, op_id = 3"),
              (1_000, 40_000, f"{SCHEDULE}.warmup"),
              (2_000, 10_000, "chunk0 forward"),
              (50_000, 90_000, f"{SCHEDULE}.steady"),
              (51_000, 60_000, "chunk0 backward")]
    launches = [(3_000, 3_500, 1), (52_000, 52_500, 2)]
    kernels = [(20_000, 30_000, 7, "fwd_gemm", 1), (70_000, 90_000, 7, "bwd_gemm", 2)]
    return write_export(path, kernels=kernels, launches=launches, ranges=ranges)
