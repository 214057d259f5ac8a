"""Write one rank's iteration as a gzip'd Kineto (PyTorch profiler) trace.

Why streaming strings: a 1,024-rank run is millions of events; building dicts
and calling ``json.dump`` per file would dominate the run time and memory.
Events are formatted straight into JSON text (names are escaped once per
stage program) and written through gzip in chunks, so a writer holds one
chunk and the stack of open frames, whatever the run's size.

Layout and argument keys follow real PyTorch 2.x GPU traces (see the A100
trace in ``../shared/data/kineto/single_rank``): a CPU process with
``pt_main_thread`` and ``pt_autograd_0``, one GPU process per visible
device with a track per CUDA stream, ``cuda_runtime`` launches linked to
kernels by ``correlation`` and ``ac2g`` flows, ``record_param_comms`` with
the process-group args, ``fwdbwd`` flows from forward ops to their backward
nodes, ``distributedInfo.pg_config`` with Megatron's group names.

Times: every timestamp is an integer number of nanoseconds (written as
microseconds with three decimals), so a child never pokes out of its parent
through rounding. A rank's node clock offset (clock skew) is added here and
nowhere else.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from .builder import COMPUTE_STREAM
from .config import SimConfig
from .program import (
    ANNOTATION,
    AUTOGRAD,
    BEGIN,
    COLL,
    COMMS,
    COSTS,
    CPU_OP,
    END,
    GAP_US,
    MEMOP,
    MODULE,
    P2P,
    PY,
    RUNTIME,
    RUNTIME_CALLS,
    SYNC,
    WAIT,
    Op,
    Tape,
    launch_call_us,
)

#: ``baseTimeNanoseconds`` of every simulated trace (2026-01-01T00:00:00Z).
BASE_TIME_NS = 1_767_225_600_000_000_000
#: Trace timestamps start this many ns after the base: room for negative clock skews.
TS_ORIGIN_NS = 1_000_000_000_000
#: Correlation ids start here, well above ``fwdbwd`` flow ids (autograd sequence numbers).
CORRELATION_BASE = 1_000_000
CHUNK_EVENTS = 8_192

DEVICE_PROPERTIES = {
    "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_045_444_608, "computeMajor": 9,
    "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
    "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232_448,
    "sharedMemPerMultiprocessor": 233_472,
}


@dataclass(frozen=True)
class GroupInfo:
    """The process group a rank uses for one group kind."""

    pg_name: str
    pg_desc: str
    ranks: tuple[int, ...]

    @property
    def ranks_text(self) -> str:
        return "[" + ", ".join(map(str, self.ranks)) + "]"


def rank_groups(topology: dict, rank: int) -> dict[str, GroupInfo]:
    """Every group kind → the group holding ``rank`` (plus ``world``, the default group)."""
    out = {}
    for kind, groups in topology["process_groups"].items():
        for key, info in groups.items():
            ranks = tuple(int(r) for r in key.split(","))
            if rank in ranks:
                out[kind] = GroupInfo(info["pg_name"], info["pg_desc"], ranks)
                break
    out["world"] = GroupInfo("0", "default_pg", tuple(range(topology["sizes"]["world"])))
    return out


def distributed_info(topology: dict, rank: int, groups: dict[str, GroupInfo]) -> dict:
    """``distributedInfo`` as PyTorch writes it: the groups this rank belongs to."""
    configs = []
    for kind, info in groups.items():
        gloo = kind.endswith("_gloo")
        configs.append({
            "pg_name": info.pg_name, "pg_desc": info.pg_desc,
            "backend_config": "cpu:gloo,cuda:gloo" if gloo else "cuda:nccl",
            "pg_size": len(info.ranks), "ranks": list(info.ranks),
        })
    configs.sort(key=lambda c: int(c["pg_name"]))
    return {"backend": "nccl", "rank": rank, "world_size": topology["sizes"]["world"],
            "pg_count": topology["pg_count"], "pg_config": configs, "nccl_version": "2.21.5"}


def _t(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


class _Out:
    """Buffered, comma-separated event output into a gzip text stream."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.buffer: list[str] = []
        self.first = True

    def add(self, event: str) -> None:
        self.buffer.append(event)
        if len(self.buffer) >= CHUNK_EVENTS:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        text = ",\n".join(self.buffer)
        self.stream.write(text if self.first else ",\n" + text)
        self.first = False
        self.buffer.clear()


def write_rank_trace(path: Path, cfg: SimConfig, topology: dict, tape: Tape, rank: int,
                     iteration: int, launch: np.ndarray, start: np.ndarray, end: np.ndarray,
                     cpu_start: float, cpu_end: float, skew_ns: int) -> int:
    """Write ``path`` (gzip'd Kineto JSON); return the number of trace events."""
    groups = rank_groups(topology, rank)
    device = rank % cfg.gpus_per_node
    pid = 100_000 + rank * 7
    tids = {0: pid, AUTOGRAD: pid + 31}
    origin = TS_ORIGIN_NS + skew_ns

    def ns(t_us: float) -> int:
        return origin + int(round(t_us * 1000.0))

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as stream:
        header = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": i, **DEVICE_PROPERTIES} for i in range(cfg.gpus_per_node)],
            "distributedInfo": distributed_info(topology, rank, groups),
            "with_stack": 1,
            "record_shapes": 1 if cfg.record_shapes else 0,
            "trace_id": f"{cfg.seed & 0xFFFFFFFF:08X}{iteration:08X}{rank:016X}",
            "host_name": f"node{rank // cfg.gpus_per_node:04d}",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_TIME_NS,
        }
        stream.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        out = _Out(stream)
        count = _emit_events(out, cfg, tape, groups, device, pid, tids, iteration, launch, start,
                             end, cpu_start, cpu_end, ns)
        out.flush()
        stream.write(f'\n], "traceName": {json.dumps(path.name)}}}\n')
    tmp.replace(path)
    return count


def _emit_events(out: _Out, cfg: SimConfig, tape: Tape, groups: dict[str, GroupInfo],
                 device: int, pid: int, tids: dict[int, int], iteration: int,
                 launch: np.ndarray, start: np.ndarray, end: np.ndarray, cpu_start: float,
                 cpu_end: float, ns: Callable[[float], int]) -> int:
    ops = tape.ops
    add = out.add
    count = 0
    ev_idx = 0
    external = 0
    python_id = 0
    correlation = CORRELATION_BASE
    streams: set[int] = {COMPUTE_STREAM}
    record_shapes = cfg.record_shapes
    # Per thread: stack of open frames
    # [start_ns, kind, name, extra, ext_id, py_id, py_parent, ev_idx, shapes]
    stacks: dict[int, list[list]] = {0: [], AUTOGRAD: []}
    cursor = cpu_start
    first_ns = ns(cpu_start)
    last_ns = ns(cpu_end)

    def innermost_external(thread: int) -> int:
        for frame in reversed(stacks[thread]):
            if frame[4]:
                return frame[4]
        return 0

    def python_parent(thread: int) -> int:
        for frame in reversed(stacks[thread]):
            if frame[5]:
                return frame[5]
        return 0

    for entry in tape.entries:
        tag = entry[0]
        if tag == BEGIN:
            _, thread, kind, name, extra, shapes = entry
            t0 = ns(cursor)
            ext = 0
            py = 0
            parent = 0
            if kind in (PY, MODULE):
                python_id += 1
                py = python_id
                parent = python_parent(thread)
            else:
                external += 1
                ext = external
            stacks[thread].append([t0, kind, name, extra, ext, py, parent, ev_idx,
                                   shapes if record_shapes else None])
            ev_idx += 1
            cursor += COSTS[kind][0]
            if extra is not None and extra[0] == "fwd":
                add(f'{{"ph":"s","id":{extra[1]},"pid":{pid},"tid":{tids[thread]},'
                    f'"ts":{_t(t0)},"cat":"fwdbwd","name":"fwdbwd"}}')
                count += 1
            elif extra is not None and extra[0] == "bwd" and extra[1] is not None:
                add(f'{{"ph":"f","id":{extra[1]},"pid":{pid},"tid":{tids[thread]},'
                    f'"ts":{_t(t0)},"cat":"fwdbwd","name":"fwdbwd","bp":"e"}}')
                count += 1
        elif tag == END:
            _, thread, kind = entry
            cursor += COSTS[kind][1]
            t0, kind, name, extra, ext, py, parent, idx, shapes = stacks[thread].pop()
            t1 = ns(cursor)
            if extra is not None and extra[0] == "step":
                name = f"ProfilerStep#{iteration}"
            head = (f'{{"ph":"X","cat":"{_CATEGORY[kind]}","name":"{name}","pid":{pid},'
                    f'"tid":{tids[thread]},"ts":{_t(t0)},"dur":{_t(t1 - t0)},"args":{{')
            if kind in (PY, MODULE):
                args = f'"Python parent id":{parent},"Python id":{py},"Ev Idx":{idx}'
                if kind == MODULE:
                    args += f',"Python module id":{extra[1]}'
            elif kind == COMMS:
                args = _comms_args(extra, ops, groups, ext, idx)
            else:
                args = f'"External id":{ext},"Record function id":{ext},"Ev Idx":{idx}'
                if extra is not None and extra[0] in ("fwd", "bwd", "eval") \
                        and extra[1] is not None:
                    fwd_thread = 0 if extra[0] == "fwd" else 1
                    args += f',"Sequence number":{extra[1]},"Fwd thread id":{fwd_thread}'
                if shapes:
                    args += "," + shapes
            add(head + args + "}}")
            count += 1
        elif tag == RUNTIME:
            _, thread, name, cbid, dur = entry
            correlation += 1
            t0 = ns(cursor)
            t1 = ns(cursor + dur)
            add(f'{{"ph":"X","cat":"cuda_runtime","name":"{name}","pid":{pid},'
                f'"tid":{tids[thread]},"ts":{_t(t0)},"dur":{_t(t1 - t0)},"args":{{'
                f'"External id":{innermost_external(thread)},"cbid":{cbid},'
                f'"correlation":{correlation}}}}}')
            count += 1
            cursor += dur + GAP_US
        else:  # LAUNCH
            i = entry[1]
            op = ops[i]
            thread = op.thread
            tid = tids[thread]
            ext = innermost_external(thread)
            correlation += 1
            l0 = float(launch[i])
            cbid = RUNTIME_CALLS[op.runtime][0]
            rt_dur = launch_call_us(op, cfg.launch_overhead_us)
            c0 = ns(l0)
            if op.kind == SYNC:
                c1 = ns(float(end[i]))
                cursor = float(end[i]) + GAP_US
            else:
                c1 = ns(l0 + rt_dur)
                cursor = l0 + rt_dur + GAP_US
            add(f'{{"ph":"X","cat":"cuda_runtime","name":"{op.runtime}","pid":{pid},'
                f'"tid":{tid},"ts":{_t(c0)},"dur":{_t(c1 - c0)},"args":{{'
                f'"External id":{ext},"cbid":{cbid},"correlation":{correlation}}}}}')
            count += 1
            if op.kind in (SYNC, WAIT):
                continue
            g0 = ns(float(start[i]))
            g1 = ns(float(end[i]))
            streams.add(op.stream)
            common = (f'"pid":{device},"tid":{op.stream},"ts":{_t(g0)},"dur":{_t(g1 - g0)}')
            if op.kind == MEMOP:
                seconds = max(g1 - g0, 1) / 1e9
                bandwidth = op.nbytes / seconds / 1e9
                add(f'{{"ph":"X","cat":"{op.cat}","name":"{op.name}",{common},"args":{{'
                    f'"External id":{ext},"device":{device},"context":1,"stream":{op.stream},'
                    f'"correlation":{correlation},"bytes":{op.nbytes},'
                    f'"memory bandwidth (GB/s)":{bandwidth:.6f}}}}}')
            else:
                if op.kind in (COLL, P2P):
                    add(f'{{"ph":"X","cat":"gpu_user_annotation","name":"{op.annotation}",'
                        f'{common},"args":{{"External id":{ext}}}}}')
                    count += 1
                blocks = op.grid[0] * op.grid[1] * op.grid[2]
                per_sm = blocks / 132.0
                warps = per_sm * (op.block[0] * op.block[1] * op.block[2]) / 32.0
                occupancy = min(100, int(warps / 64.0 * 100.0))
                args = (f'"External id":{ext},"queued":0,"device":{device},"context":1,'
                        f'"stream":{op.stream},"correlation":{correlation},'
                        f'"registers per thread":{op.regs},"shared memory":{op.smem},'
                        f'"blocks per SM":{per_sm:.6f},"warps per SM":{warps:.6f},'
                        f'"grid":[{op.grid[0]}, {op.grid[1]}, {op.grid[2]}],'
                        f'"block":[{op.block[0]}, {op.block[1]}, {op.block[2]}],'
                        f'"est. achieved occupancy %":{occupancy}')
                if op.kind in (COLL, P2P):
                    args += "," + _nccl_args(op, groups)
                add(f'{{"ph":"X","cat":"kernel","name":"{op.name}",{common},"args":{{{args}}}}}')
            add(f'{{"ph":"s","id":{correlation},"pid":{pid},"tid":{tid},"ts":{_t(c0)},'
                f'"cat":"ac2g","name":"ac2g"}}')
            add(f'{{"ph":"f","id":{correlation},"pid":{device},"tid":{op.stream},'
                f'"ts":{_t(g0)},"cat":"ac2g","name":"ac2g","bp":"e"}}')
            count += 3
            last_ns = max(last_ns, g1)
    # Metadata, the profiler span and its instants.
    meta = [
        ("process_name", pid, 0, '{"name":"python3"}'),
        ("process_labels", pid, 0, '{"labels":"CPU"}'),
        ("process_sort_index", pid, 0, f'{{"sort_index":{pid}}}'),
    ]
    for d in range(cfg.gpus_per_node):
        meta += [("process_name", d, 0, '{"name":"python3"}'),
                 ("process_labels", d, 0, f'{{"labels":"GPU {d}"}}'),
                 ("process_sort_index", d, 0, f'{{"sort_index":{16777216 + d}}}')]
    for stream in sorted(streams):
        meta += [("thread_name", device, stream, f'{{"name":"stream {stream} "}}'),
                 ("thread_sort_index", device, stream, f'{{"sort_index":{stream}}}')]
    meta += [("thread_name", pid, tids[0], f'{{"name":"thread {tids[0]} (pt_main_thread)"}}'),
             ("thread_sort_index", pid, tids[0], f'{{"sort_index":{tids[0]}}}'),
             ("thread_name", pid, tids[AUTOGRAD],
              f'{{"name":"thread {tids[AUTOGRAD]} (pt_autograd_0)"}}'),
             ("thread_sort_index", pid, tids[AUTOGRAD], f'{{"sort_index":{tids[AUTOGRAD]}}}')]
    for name, mpid, mtid, args in meta:
        add(f'{{"name":"{name}","ph":"M","ts":{_t(first_ns)},"pid":{mpid},"tid":{mtid},'
            f'"args":{args}}}')
    add(f'{{"ph":"M","name":"process_sort_index","ts":{_t(first_ns)},"pid":"Spans","tid":0,'
        f'"args":{{"sort_index":536870912}}}}')
    add(f'{{"ph":"X","cat":"Trace","ts":{_t(first_ns)},"dur":{_t(last_ns - first_ns)},'
        f'"pid":"Spans","tid":"PyTorch Profiler","name":"PyTorch Profiler (0)",'
        f'"args":{{"Op count":0}}}}')
    add(f'{{"name":"Iteration Start: PyTorch Profiler","ph":"i","s":"g","pid":"Traces",'
        f'"tid":"Trace PyTorch Profiler","ts":{_t(first_ns)}}}')
    add(f'{{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":{_t(last_ns)}}}')
    return count + len(meta) + 4


_CATEGORY = {PY: "python_function", MODULE: "python_function", CPU_OP: "cpu_op",
             ANNOTATION: "user_annotation", COMMS: "cpu_op"}


def _group_fields(info: GroupInfo) -> str:
    fields = (f'"Process Group Name":"{info.pg_name}","Process Group Description":'
              f'"{info.pg_desc}","Process Group Ranks":"{info.ranks_text}",'
              f'"Group size":{len(info.ranks)}')
    return fields


def _nccl_args(op: Op, groups: dict[str, GroupInfo]) -> str:
    info = groups[op.group]
    return (f'"Collective name":"{op.coll}","In msg nelems":{op.in_nelems},'
            f'"Out msg nelems":{op.out_nelems},"Group size":{len(info.ranks)},'
            f'"dtype":"{op.dtype}","In split size":"[]","Out split size":"[]",'
            f'"Process Group Name":"{info.pg_name}","Process Group Description":'
            f'"{info.pg_desc}","Process Group Ranks":"{info.ranks_text}"')


def _comms_args(extra: tuple, ops: list, groups: dict[str, GroupInfo], ext: int,
                idx: int) -> str:
    """Args of a ``record_param_comms`` cpu_op (a collective, a queued P2P, or a wait)."""
    base = f'"External id":{ext},"Record function id":{ext},"Ev Idx":{idx}'
    if extra[0] == "wait":
        return (base + ',"Collective name":"wait","dtype":"Byte","In msg nelems":0,'
                '"Out msg nelems":0,"Group size":1,"Process Group Ranks":"[]",'
                '"In split size":"[]","Out split size":"[]"')
    op = ops[extra[1]]
    info = groups[op.group]
    if extra[0] == "comms_p2p":
        coll, nelems = extra[2], extra[3]
        in_n, out_n = (nelems, 0) if coll == "send" else (0, nelems)
    else:
        coll, in_n, out_n = op.coll, op.in_nelems, op.out_nelems
    # ProcessGroupNCCL: stride 0 for one rank, -1 when the ranks are not evenly spaced.
    ranks = info.ranks
    step = ranks[1] - ranks[0] if len(ranks) > 1 else 0
    if any(b - a != step for a, b in zip(ranks, ranks[1:])):
        step = -1
    stride = f',"Global rank start":{ranks[0]},"Global rank stride":{step}'
    return (base + f',"Collective name":"{coll}","In msg nelems":{in_n},'
            f'"Out msg nelems":{out_n},"dtype":"{op.dtype}","In split size":"[]",'
            f'"Out split size":"[]",' + _group_fields(info) + stride)
