#!/usr/bin/env python3
"""A flow- and instant-heavy synthetic Kineto trace set for benchmarks/ingest.py.

Why: the shared traces are CPU-heavy (Megatron on CPU) or small; real GPU
traces such as HTA's 54 MB V100 test trace carry one ``ac2g`` flow pair per
launch, forward/backward flows and tens of thousands of instant events on
many streams, which exercise flow pairing, binding and the typed args far
more. This writes traces of that shape, deterministically (a fixed seed),
so the benchmark keeps the generator and not the data.

Per step and rank: a ``ProfilerStep#N`` on the main thread holding
``aten::`` ops, each launching a kernel on one of ``streams`` GPU streams
(``cudaLaunchKernel`` -> kernel, an ``ac2g`` flow with the correlation id),
a ``fwdbwd`` flow from forward to backward op, and instant events on the
CPU threads (``ph: "i"``, as the memory profiler writes them).

    python benchmarks/flowgen.py OUT_DIR [--ranks 4] [--steps 40] [--ops 600]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

BASE_NS = 1_700_000_000_000_000_000  # baseTimeNanoseconds; event times are µs after it


def trace(rank: int, world: int, steps: int, ops: int, streams: int) -> dict:
    rnd = random.Random(1_000 + rank)
    events: list[dict] = []
    pid, tid, gpu_pid = 1000 + rank, 1001 + rank, rank
    # Ids as large as real traces': HTA downcasts a correlation column that fits
    # int16 and then fails to store row numbers in it.
    corr, ext, flow = 1_000_000, 500_000, 0
    t = 1_000.0
    for step in range(steps):
        step_start = t
        t += 1.5
        backward_of: list[tuple[float, int]] = []
        for op in range(ops):
            ext += 1
            corr += 1
            dur = round(rnd.uniform(8, 40), 3)
            name = f"aten::op{op % 37}" if op < ops // 2 else f"autograd::op{op % 29}Backward"
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid,
                           "ts": round(t, 3), "dur": dur,
                           "args": {"External id": ext, "Sequence number": op,
                                    "Fwd thread id": 0, "Record function id": 0}})
            launch = round(t + dur / 3, 3)
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": pid, "tid": tid, "ts": launch, "dur": 4.125,
                           "args": {"External id": ext, "cbid": 211, "correlation": corr}})
            stream = 7 + (op % streams)
            k_ts = round(launch + rnd.uniform(5, 50), 3)
            events.append({"ph": "X", "cat": "kernel", "name": f"void kernel_{op % 53}<float>",
                           "pid": gpu_pid, "tid": stream, "ts": k_ts,
                           "dur": round(rnd.uniform(2, 30), 3),
                           "args": {"External id": ext, "queued": 0, "device": rank,
                                    "context": 1, "stream": stream, "correlation": corr,
                                    "registers per thread": 32, "shared memory": 0,
                                    "blocks per SM": 0.5, "grid": [80, 1, 1],
                                    "block": [256, 1, 1]}})
            events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": launch,
                           "cat": "ac2g", "name": "ac2g"})
            events.append({"ph": "f", "id": corr, "pid": gpu_pid, "tid": stream, "ts": k_ts,
                           "cat": "ac2g", "name": "ac2g", "bp": "e"})
            if op < ops // 2:
                backward_of.append((t, op))
            elif backward_of:
                fwd_ts, _ = backward_of.pop()
                flow += 1
                events.append({"ph": "s", "id": flow, "pid": pid, "tid": tid, "ts": fwd_ts,
                               "cat": "fwdbwd", "name": "fwdbwd"})
                events.append({"ph": "f", "id": flow, "pid": pid, "tid": tid,
                               "ts": round(t, 3), "cat": "fwdbwd", "name": "fwdbwd",
                               "bp": "e"})
            if op % 3 == 0:
                events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t",
                               "name": "[memory]", "pid": pid, "tid": tid,
                               "ts": round(t + 0.5, 3),
                               "args": {"Total Reserved": 1 << 30, "Bytes": 512 * op,
                                        "Total Allocated": 1 << 29, "Device Id": rank,
                                        "Device Type": 1, "Addr": 140_000_000 + op}})
            t += dur + 1.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": pid, "tid": tid, "ts": round(step_start, 3),
                       "dur": round(t - step_start, 3), "args": {}})
        t += 5.0
    events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": "python main"}})
    for stream in range(streams):
        events.append({"ph": "M", "name": "thread_name", "pid": gpu_pid, "tid": 7 + stream,
                       "args": {"name": f"stream {7 + stream}"}})
    return {"schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "deviceProperties": [{"id": rank, "name": "Synthetic GPU"}],
            "baseTimeNanoseconds": BASE_NS, "traceEvents": events}


def write_set(out: Path, ranks: int = 4, steps: int = 40, ops: int = 600,
              streams: int = 8) -> list[Path]:
    """Write ``ranks`` gzipped traces ``rank-<r>.json.gz`` into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        path = out / f"rank-{rank}.json.gz"
        with gzip.open(path, "wt", compresslevel=6) as fh:
            json.dump(trace(rank, ranks, steps, ops, streams), fh)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ops", type=int, default=600, help="CPU ops (one kernel each) per step")
    ap.add_argument("--streams", type=int, default=8)
    args = ap.parse_args()
    for path in write_set(args.out, args.ranks, args.steps, args.ops, args.streams):
        print(path)


if __name__ == "__main__":
    main()
