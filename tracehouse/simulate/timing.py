"""The timing model: when every operation of every rank starts and ends.

How it works (a discrete-event simulation, vectorised):

* Ranks at the same pipeline stage run the same program, so a stage is
  simulated for all its ranks at once: every time is a NumPy array over the
  stage's ranks, ordered by pipeline group (position ``i`` at stage ``s`` and
  at stage ``s+1`` are pipeline neighbours).
* Per rank there is one CPU cursor and one "free at" time per CUDA stream.
  An op launches when the CPU reaches it (``cpu_before`` after the previous
  launch); a kernel starts at ``max(launch + latency, its stream free, for
  communication also the compute stream's tail)``.
* Collectives end when their *last* member arrives plus the transfer time
  (:mod:`.costs`); members arriving earlier wait inside the NCCL kernel.
  Tensor-, context-, expert- and data-parallel groups live inside one stage,
  so their max is a reshape over the stage's arrays.
* Pipeline sends/receives and the collectives that span stages (embedding
  group, the distributed optimizer's world group) are rendezvous: an op posts
  its start under a key and ends once every participant has posted. A stage
  whose next op needs a stream whose last op is still unresolved waits; the
  stages are swept round-robin until all are done (a sweep without progress
  means the program would deadlock, and is reported).
* ``torch.cuda.synchronize()`` moves the CPU cursor to the time every stream
  is idle; ``work.wait()`` makes the compute stream wait for a comm op.

Bubbles, P2P waits and collective waits are therefore consequences of the
dependencies; nothing is painted on. Stragglers scale their compute kernels;
every compute kernel gets a deterministic log-normal jitter from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import costs
from .builder import COMPUTE_STREAM, STAGE_LOCAL_GROUPS
from .config import SimConfig
from .program import (
    COLL,
    GAP_US,
    KERNEL,
    LAUNCH_LATENCY_US,
    MEMOP,
    P2P,
    SYNC,
    WAIT,
    Op,
    launch_call_us,
)
from .training import StageProgram

#: CPU time between the end of one iteration's program and the next (logging, data).
ITERATION_GAP_US = 150.0
#: Comm kinds reported in the ground truth.
WAIT_KINDS = ("tp", "cp", "ep", "etp", "dp_cp", "edp", "embedding", "intra_dist_opt", "pp")


@dataclass
class StageTimes:
    """One stage's op times for one iteration, arrays (ops x positions) in us."""

    launch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cpu_start: np.ndarray  # CPU cursor at the tape's start, per position
    cpu_end: np.ndarray  # CPU cursor after the tape's last entry
    compute_us: np.ndarray  # sum of compute-stream kernel durations
    schedule_start: np.ndarray  # first forward kernel start
    schedule_end: np.ndarray  # last backward kernel end
    schedule_busy_us: np.ndarray  # forward + backward + recompute compute kernel time
    recompute_us: np.ndarray  # compute kernel time of activation recomputation
    #: Start of each communication op's transfer (after waiting for its peers; NaN for
    #: other ops): what hiding it behind compute could hide.
    transfer_start: np.ndarray | None = None
    wait_us: dict[str, np.ndarray] = field(default_factory=dict)  # comm waiting by group


class _Groups:
    """Stage-local group structure: how to take a max over each group's members."""

    def __init__(self, ranks: np.ndarray, groups: list[list[int]], gpus_per_node: int) -> None:
        position = {int(r): i for i, r in enumerate(ranks)}
        gid = np.full(len(ranks), -1, dtype=np.int64)
        spans = np.zeros(len(ranks), dtype=bool)
        count = 0
        for group in groups:
            members = [position[r] for r in group if r in position]
            if not members:
                continue
            if len(members) != len(group):
                raise AssertionError(f"group {group} spans pipeline stages")
            gid[members] = count
            spans[members] = len({r // gpus_per_node for r in group}) > 1
            count += 1
        self.size = len(groups[0])
        self.order = np.argsort(gid, kind="stable")
        self.inverse = np.argsort(self.order, kind="stable")
        self.spans = spans

    def max(self, values: np.ndarray) -> np.ndarray:
        """Each position's group maximum."""
        grouped = values[self.order].reshape(-1, self.size).max(axis=1)
        return np.repeat(grouped, self.size)[self.inverse]


class Timeline:
    """Simulates iterations of a run; keeps the streams' and CPUs' state between them."""

    def __init__(self, cfg: SimConfig, topology: dict, programs: list[StageProgram]) -> None:
        self.cfg = cfg
        self.programs = programs
        pp_groups = topology["groups"]["pp"]
        self.stage_ranks = [np.array([g[s] for g in pp_groups], dtype=np.int64)
                            for s in range(cfg.pp)]
        self.n = len(pp_groups)
        node = [r // cfg.gpus_per_node for r in self.stage_ranks]
        self.groups: list[dict[str, _Groups]] = []
        for s in range(cfg.pp):
            per_kind = {}
            for kind in STAGE_LOCAL_GROUPS:
                per_kind[kind] = _Groups(self.stage_ranks[s], topology["groups"][kind],
                                         cfg.gpus_per_node)
            self.groups.append(per_kind)
        # Pipeline neighbours on the same node?
        self.same_node = {
            (s, side): node[s] == node[(s + 1) % cfg.pp if side == "next" else (s - 1) % cfg.pp]
            for s in range(cfg.pp) for side in ("next", "prev")
        }
        self.embedding_spans = node[0] != node[-1]
        self.world_spans = cfg.world > cfg.gpus_per_node
        self.factor = [np.array([cfg.straggler_factor(int(r)) for r in ranks])
                       for ranks in self.stage_ranks]
        self.cpu = [np.zeros(self.n) for _ in range(cfg.pp)]
        self.free: list[dict[int, np.ndarray]] = [dict() for _ in range(cfg.pp)]

    # -- helpers ------------------------------------------------------------
    def _stream(self, s: int, stream: int) -> np.ndarray:
        free = self.free[s]
        if stream not in free:
            free[stream] = np.zeros(self.n)
        return free[stream]

    def _comm_us(self, s: int, op: Op) -> np.ndarray:
        """Transfer time of ``op`` at every position of stage ``s``, slowed by
        the config's factor for its group kind (a slow link)."""
        slowdown = self.cfg.group_slowdown("pp" if op.kind == P2P else op.group)
        return self._nominal_comm_us(s, op) * slowdown

    def _nominal_comm_us(self, s: int, op: Op) -> np.ndarray:
        """Transfer time of ``op`` at every position of stage ``s`` on healthy links."""
        if op.kind == P2P:
            side = _side(op, s, self.cfg.pp)
            intra = costs.p2p_us(op.nbytes, True)
            inter = costs.p2p_us(op.nbytes, False)
            return np.where(self.same_node[(s, side)], intra, inter)
        if op.group in STAGE_LOCAL_GROUPS:
            g = self.groups[s][op.group]
            intra = costs.collective_us(op.coll, op.nbytes, g.size, False)
            inter = costs.collective_us(op.coll, op.nbytes, g.size, True)
            return np.where(g.spans, inter, intra)
        if op.group == "embedding":
            return np.where(self.embedding_spans,
                            costs.collective_us(op.coll, op.nbytes, 2, True),
                            costs.collective_us(op.coll, op.nbytes, 2, False))
        return np.full(self.n, costs.collective_us(op.coll, op.nbytes, self.cfg.world,
                                                   self.world_spans))

    # -- one iteration ------------------------------------------------------
    def run_iteration(self, iteration: int) -> list[StageTimes]:
        """Simulate one iteration; return per-stage op times (state carries over)."""
        cfg = self.cfg
        n_stages = cfg.pp
        tapes = [p.tape for p in self.programs]
        rngs = [np.random.default_rng([cfg.seed, iteration, s]) for s in range(n_stages)]
        times = []
        for s, tape in enumerate(tapes):
            k = len(tape.ops)
            nan = np.full((k, self.n), np.nan)
            times.append(StageTimes(
                launch=nan.copy(), start=nan.copy(), end=nan,
                cpu_start=self.cpu[s].copy(), cpu_end=np.zeros(self.n),
                compute_us=np.zeros(self.n), schedule_start=np.full(self.n, np.inf),
                schedule_end=np.full(self.n, -np.inf), schedule_busy_us=np.zeros(self.n),
                recompute_us=np.zeros(self.n),
                wait_us={kind: np.zeros(self.n) for kind in WAIT_KINDS}))
        pc = [0] * n_stages
        unknown: list[dict[int, int]] = [dict() for _ in range(n_stages)]  # stream -> op
        posts: dict[tuple, dict[int, int]] = {}
        waiting: dict[tuple[int, int], int] = {}  # (stage, op) -> unposted keys left
        comm_us: dict[tuple[int, int], np.ndarray] = {}

        def resolve(s: int, i: int) -> None:
            op = tapes[s].ops[i]
            t = times[s]
            arrival = t.start[i]
            if op.kind == P2P:
                for key, peer in op.keys:
                    arrival = np.maximum(arrival, times[peer].start[posts[key][peer]])
            elif op.group == "embedding":
                (key, participants), = op.keys
                for peer in participants:
                    arrival = np.maximum(arrival, times[peer].start[posts[key][peer]])
            else:
                (key, participants), = op.keys
                top = max(float(times[peer].start[posts[key][peer]].max())
                          for peer in participants)
                arrival = np.full(self.n, top)
            dur = comm_us[(s, i)]
            t.end[i] = arrival + dur
            kind = "pp" if op.kind == P2P else op.group
            t.wait_us[kind] += arrival - t.start[i]
            free = self.free[s]
            free[op.stream] = np.maximum(self._stream(s, op.stream), t.end[i])
            if unknown[s].get(op.stream) == i:
                del unknown[s][op.stream]
            if op.blocking:
                free[COMPUTE_STREAM] = np.maximum(self._stream(s, COMPUTE_STREAM), t.end[i])
                if unknown[s].get(COMPUTE_STREAM) == i:
                    del unknown[s][COMPUTE_STREAM]

        def post(s: int, i: int) -> None:
            op = tapes[s].ops[i]
            waiting[(s, i)] = len(op.keys)
            for key, peer in op.keys:
                entry = posts.setdefault(key, {})
                entry[s] = i
                participants = (s, peer) if op.kind == P2P else peer
                if all(p in entry for p in participants):
                    for p in participants:
                        j = entry[p]
                        waiting[(p, j)] -= 1
                        if waiting[(p, j)] == 0:
                            del waiting[(p, j)]
                            resolve(p, j)

        def ready(s: int, op: Op) -> bool:
            busy = unknown[s]
            if op.kind == SYNC:
                return not busy if op.sync_all else COMPUTE_STREAM not in busy
            if op.kind == WAIT:
                return not np.isnan(times[s].end[op.wait][0])
            if COMPUTE_STREAM in busy:
                return False
            return op.kind in (KERNEL, MEMOP) or op.stream not in busy

        def step(s: int, i: int) -> None:
            op = tapes[s].ops[i]
            t = times[s]
            launch = self.cpu[s] + op.cpu_before
            t.launch[i] = launch
            compute = self._stream(s, COMPUTE_STREAM)
            if op.kind == SYNC:
                streams = self.free[s].values() if op.sync_all else [compute]
                idle = np.maximum.reduce([launch + op.runtime_us, *streams])
                t.start[i] = launch
                t.end[i] = idle
                self.cpu[s] = idle + GAP_US
                return
            call_us = launch_call_us(op, cfg.launch_overhead_us)
            self.cpu[s] = launch + call_us + GAP_US
            if op.kind == WAIT:
                done = t.end[op.wait]
                t.start[i] = t.end[i] = done
                self.free[s][COMPUTE_STREAM] = np.maximum(compute, done)
                return
            ready_at = launch + (call_us - op.runtime_us) + LAUNCH_LATENCY_US
            if op.kind in (KERNEL, MEMOP):
                start = np.maximum(ready_at, compute)
                dur = op.dur_us
                if op.kind == KERNEL:
                    dur = dur * self.factor[s] * np.exp(rngs[s].normal(0.0, cfg.jitter, self.n))
                end = start + dur
                t.start[i], t.end[i] = start, end
                self.free[s][COMPUTE_STREAM] = end
                t.compute_us += end - start
                if op.phase in ("forward", "backward", "recompute"):
                    # Recomputation is stage work, as the warehouse counts it.
                    t.schedule_busy_us += end - start
                    if op.phase == "forward":
                        t.schedule_start = np.minimum(t.schedule_start, start)
                    else:
                        t.schedule_end = np.maximum(t.schedule_end, end)
                if op.phase == "recompute":
                    t.recompute_us += end - start
                return
            # Communication: waits for its stream and for the data on the compute stream.
            start = np.maximum(np.maximum(ready_at, self._stream(s, op.stream)), compute)
            t.start[i] = start
            dur = self._comm_us(s, op) * (1.0 + abs(rngs[s].normal(0.0, cfg.jitter / 2)))
            comm_us[(s, i)] = dur
            if op.kind == COLL and op.group in STAGE_LOCAL_GROUPS:
                arrival = self.groups[s][op.group].max(start)
                t.end[i] = arrival + dur
                t.wait_us[op.group] += arrival - start
                self.free[s][op.stream] = t.end[i]
                if op.blocking:
                    self.free[s][COMPUTE_STREAM] = np.maximum(compute, t.end[i])
                return
            unknown[s][op.stream] = i
            if op.blocking:
                unknown[s][COMPUTE_STREAM] = i
            post(s, i)

        remaining = sum(len(t.ops) for t in tapes)
        while remaining:
            progressed = False
            for s, tape in enumerate(tapes):
                ops = tape.ops
                while pc[s] < len(ops) and ready(s, ops[pc[s]]):
                    step(s, pc[s])
                    pc[s] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                stuck = {s: (pc[s], _describe(tapes[s].ops[pc[s]]))
                         for s in range(n_stages) if pc[s] < len(tapes[s].ops)}
                raise RuntimeError(f"simulated schedule deadlocked; next ops per stage: {stuck}")
        if waiting:
            raise RuntimeError(f"unmatched communication at the end of the iteration: {waiting}")
        for stage_times in times:
            stage_times.transfer_start = np.full_like(stage_times.end, np.nan)
        for (s, i), dur in comm_us.items():
            times[s].transfer_start[i] = times[s].end[i] - dur
        for s, tape in enumerate(tapes):
            times[s].cpu_end = self.cpu[s] + tape.tail_us
            self.cpu[s] = times[s].cpu_end + ITERATION_GAP_US
        return times


def _side(op: Op, stage: int, pp: int) -> str:
    """Which neighbour a P2P op talks to ("next" or "prev"), from its first key."""
    (_key, peer) = op.keys[0]
    return "next" if peer == (stage + 1) % pp else "prev"


def _describe(op: Op) -> str:
    kind = {KERNEL: "kernel", MEMOP: "memop", COLL: "collective", P2P: "p2p", WAIT: "wait",
            SYNC: "sync"}[op.kind]
    return f"{kind} {op.coll or op.name[:40]} group={op.group}"
