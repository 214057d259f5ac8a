"""``simulate_run``: a whole synthetic run on disk, laid out as the Megatron patch does.

Why this shape: ``DIR/topology.json`` plus
``DIR/iteration_N/rank_XXXX_iter_N.pt.trace.json.gz`` (and the PP timer's
``DIR/pp_timer_logs/event_times_*.json`` for the first iteration, see
:mod:`.pp_timer_logs`) is what tracehouse's
ingest discovers for a real Megatron-TraceViz run, so a simulated run goes
through exactly the code a real one does. ``DIR/ground_truth.json`` records
what was injected and what the timing model computed, so tests can check
what the warehouse finds.

Scale: the timing model runs in this process over NumPy arrays (ops x ranks
per stage, a few MB per iteration at 1,024 ranks); each rank's file is then
written by a worker process that replays its stage's program with those
times, streaming through gzip. Iterations are simulated one after another
and their arrays dropped once written.

Node model (for clock skew and for intra- vs inter-node bandwidth): rank r
runs on node ``r // gpus_per_node`` (8 by default) as local GPU
``r % gpus_per_node``. Each node's clock is offset by a value drawn
uniformly from ``[-clock_skew_us, +clock_skew_us]`` (node 0 keeps the true
clock); the offset is added to every timestamp that node's ranks write.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from ..core.topology import build_topology
from .config import SimConfig
from .exposure import exposed_comm_us
from .model_config import (
    cost_model_flops_per_iteration,
    kernel_flops_per_iteration,
    write_model_config,
)
from .pp_timer_logs import write_pp_timer_logs
from .timing import WAIT_KINDS, StageTimes, Timeline
from .training import StageProgram, check_p2p_balance, stage_program
from .writer import BASE_TIME_NS, TS_ORIGIN_NS, write_rank_trace

GROUND_TRUTH_FORMAT = "tracehouse-simulate/1"


@dataclass
class SimulatedRun:
    """Where a simulated run landed and what it contains."""

    out_dir: Path
    config: SimConfig
    topology_path: Path
    ground_truth_path: Path
    trace_paths: list[Path] = field(default_factory=list)
    #: PP-timer logs (one per rank) of :attr:`pp_timer_iteration`.
    pp_timer_paths: list[Path] = field(default_factory=list)
    pp_timer_iteration: int | None = None
    events: int = 0
    seconds: float = 0.0

    @property
    def ground_truth(self) -> dict:
        """The parsed ``ground_truth.json``."""
        return json.loads(self.ground_truth_path.read_text())


def trace_path(out_dir: Path, rank: int, iteration: int) -> Path:
    """``out_dir/iteration_N/rank_XXXX_iter_N.pt.trace.json.gz``."""
    return out_dir / f"iteration_{iteration}" / f"rank_{rank:04d}_iter_{iteration}.pt.trace.json.gz"


def node_skews_us(cfg: SimConfig) -> np.ndarray:
    """Clock offset of every node in us (node 0: 0), drawn from the seed."""
    nodes = (cfg.world + cfg.gpus_per_node - 1) // cfg.gpus_per_node
    rng = np.random.default_rng([cfg.seed, 0xC10C])
    skews = rng.uniform(-cfg.clock_skew_us, cfg.clock_skew_us, nodes)
    skews[0] = 0.0
    return skews


def default_jobs(cfg: SimConfig) -> int:
    """Worker processes: none for small runs (start-up would dominate), else up to 8."""
    if cfg.world * cfg.iterations <= 32:
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def simulate_run(config: SimConfig, out_dir: Path | str, jobs: int | None = None,
                 progress: bool = False) -> SimulatedRun:
    """Simulate ``config`` and write the run under ``out_dir``.

    Args:
        config: the run to simulate.
        out_dir: destination folder (created; existing files of the same names
            are replaced).
        jobs: worker processes writing traces (default: :func:`default_jobs`).
        progress: print one progress line per iteration to stderr.

    Returns:
        The :class:`SimulatedRun` with every path written.
    """
    began = time.perf_counter()
    cfg = config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    topology = build_topology(cfg.world, cfg.tp, cfg.pp, cfg.cp, cfg.ep, cfg.etp,
                              cfg.vpp if cfg.vpp > 1 else None)
    topology_path = out / "topology.json"
    topology_path.write_text(json.dumps(topology, indent=1) + "\n")
    write_model_config(cfg, out)
    programs = [stage_program(cfg, s) for s in range(cfg.pp)]
    check_p2p_balance(programs)
    timeline = Timeline(cfg, topology, programs)
    skews = node_skews_us(cfg)
    jobs = default_jobs(cfg) if jobs is None else max(1, jobs)
    run = SimulatedRun(out_dir=out, config=cfg, topology_path=topology_path,
                       ground_truth_path=out / "ground_truth.json")
    per_iteration = {}
    pool = None
    if jobs > 1:
        pool = get_context("forkserver" if sys.platform != "win32" else "spawn").Pool(
            jobs, initializer=_init_worker, initargs=(cfg, topology))
    try:
        for iteration in cfg.iteration_numbers:
            times = timeline.run_iteration(iteration)
            if run.pp_timer_iteration is None:
                # The PP timer covers one iteration (ENABLE_PP_TIMER_ITER): the first profiled.
                run.pp_timer_iteration = iteration
                run.pp_timer_paths = write_pp_timer_logs(out, cfg, topology, timeline, times,
                                                         programs, iteration)
            tasks = _tasks(cfg, timeline, times, out, iteration, skews)
            if pool is None:
                _init_worker(cfg, topology)
                results = map(_write_task, tasks)
            else:
                results = pool.imap_unordered(_write_task, tasks, chunksize=4)
            for path, events in results:
                run.trace_paths.append(path)
                run.events += events
            per_iteration[iteration] = _iteration_facts(cfg, timeline, times, programs)
            if progress:
                print(f"simulate: iteration {iteration}: {cfg.world} traces written "
                      f"({time.perf_counter() - began:.1f} s)", file=sys.stderr)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    run.trace_paths.sort()
    truth = _ground_truth(cfg, topology, timeline, skews, per_iteration, run.pp_timer_iteration)
    truth["efficiency"]["timed_kernel_flops_per_rank"] = _timed_kernel_flops(
        cfg, timeline, programs)
    run.ground_truth_path.write_text(json.dumps(truth, indent=1) + "\n")
    run.seconds = time.perf_counter() - began
    return run


def _tasks(cfg: SimConfig, timeline: Timeline, times: list[StageTimes], out: Path,
           iteration: int, skews: np.ndarray):
    for s, stage in enumerate(times):
        for pos, rank in enumerate(timeline.stage_ranks[s].tolist()):
            skew_ns = int(round(skews[rank // cfg.gpus_per_node] * 1000.0))
            yield (trace_path(out, rank, iteration), rank, s, iteration,
                   np.ascontiguousarray(stage.launch[:, pos]),
                   np.ascontiguousarray(stage.start[:, pos]),
                   np.ascontiguousarray(stage.end[:, pos]),
                   float(stage.cpu_start[pos]), float(stage.cpu_end[pos]), skew_ns)


_WORKER: dict = {}


def _init_worker(cfg: SimConfig, topology: dict) -> None:
    _WORKER["cfg"] = cfg
    _WORKER["topology"] = topology


def _write_task(task: tuple) -> tuple[Path, int]:
    path, rank, stage, iteration, launch, start, end, cpu_start, cpu_end, skew_ns = task
    cfg = _WORKER["cfg"]
    program = stage_program(cfg, stage)
    events = write_rank_trace(path, cfg, _WORKER["topology"], program.tape, rank, iteration,
                              launch, start, end, cpu_start, cpu_end, skew_ns)
    return path, events


def _iteration_facts(cfg: SimConfig, timeline: Timeline, times: list[StageTimes],
                     programs: list[StageProgram]) -> dict:
    """Per-rank and per-pipeline-group timing facts of one iteration (true clock, us)."""
    ranks = {}
    for s, stage in enumerate(times):
        gpu_end = np.nanmax(stage.end, axis=0)
        for pos, rank in enumerate(timeline.stage_ranks[s].tolist()):
            ranks[str(rank)] = {
                "stage": s,
                "cpu_start_us": round(float(stage.cpu_start[pos]), 3),
                "cpu_end_us": round(float(stage.cpu_end[pos]), 3),
                "gpu_end_us": round(float(gpu_end[pos]), 3),
                "compute_us": round(float(stage.compute_us[pos]), 3),
                "schedule_start_us": round(float(stage.schedule_start[pos]), 3),
                "schedule_end_us": round(float(stage.schedule_end[pos]), 3),
                "schedule_busy_us": round(float(stage.schedule_busy_us[pos]), 3),
                "recompute_us": round(float(stage.recompute_us[pos]), 3),
                "exposed_comm_us": exposed_comm_us(programs[s].tape, stage, pos),
                "comm_wait_us": {k: round(float(stage.wait_us[k][pos]), 3) for k in WAIT_KINDS
                                 if stage.wait_us[k][pos] > 0},
            }
    groups = []
    for pos in range(timeline.n):
        members = [int(timeline.stage_ranks[s][pos]) for s in range(cfg.pp)]
        t0 = min(times[s].schedule_start[pos] for s in range(cfg.pp))
        t1 = max(times[s].schedule_end[pos] for s in range(cfg.pp))
        span = float(t1 - t0)
        busy = [float(times[s].schedule_busy_us[pos]) for s in range(cfg.pp)]
        groups.append({
            "ranks": members,
            "schedule_span_us": round(span, 3),
            "stage_busy_us": [round(b, 3) for b in busy],
            "stage_bubble_ratio": [round(1.0 - b / span, 6) if span > 0 else 0.0 for b in busy],
        })
    return {"ranks": ranks, "pipeline_groups": groups}


def _timed_kernel_flops(cfg: SimConfig, timeline: Timeline, programs: list) -> dict[str, float]:
    """Per rank, the GEMM and attention FLOPs its kernels were timed for in one
    iteration (every rank of a stage runs its stage's program)."""
    out = {}
    for s, program in enumerate(programs):
        flops = float(sum(op.flops for op in program.tape.ops))
        for rank in timeline.stage_ranks[s].tolist():
            out[str(rank)] = flops
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


def _ground_truth(cfg: SimConfig, topology: dict, timeline: Timeline, skews: np.ndarray,
                  per_iteration: dict, pp_timer_iteration: int | None) -> dict:
    config = asdict(cfg)
    config["stragglers"] = [list(s) for s in cfg.stragglers]
    config["slow_groups"] = [list(s) for s in cfg.slow_groups]
    schedule = "no_pipelining" if cfg.pp == 1 else cfg.schedule
    ranks = []
    for rank in range(cfg.world):
        coords = topology["ranks"][str(rank)]
        ranks.append({
            "rank": rank, **coords, "node": rank // cfg.gpus_per_node,
            "local_device": rank % cfg.gpus_per_node,
            "straggler_factor": cfg.straggler_factor(rank),
            "clock_skew_us": round(float(skews[rank // cfg.gpus_per_node]), 3),
        })
    return {
        "format": GROUND_TRUTH_FORMAT,
        "config": config,
        "schedule": schedule,
        "world": cfg.world,
        "tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp, "cp": cfg.cp, "ep": cfg.ep, "vpp": cfg.vpp,
        "microbatches": cfg.microbatches,
        "analytical_bubble_ratio": cfg.analytical_bubble_ratio(),
        "bubble_formula": ("(p-1)/(v*m+p-1)" if schedule == "interleaved" else "(p-1)/(m+p-1)"),
        "iterations": cfg.iteration_numbers,
        "node_model": {"gpus_per_node": cfg.gpus_per_node,
                       "node_of_rank": "rank // gpus_per_node",
                       "clock_skew": "uniform in [-clock_skew_us, +clock_skew_us] per node, "
                                     "node 0 = 0; added to every timestamp the node writes"},
        "time_origin_ns": BASE_TIME_NS + TS_ORIGIN_NS,
        "time_note": "all *_us timing facts are true (unskewed) microseconds after "
                     "time_origin_ns; a rank's trace shows them shifted by its clock_skew_us",
        "timing_note": "per pipeline group and iteration: schedule_span_us = last backward "
                       "compute kernel end - first forward compute kernel start over the "
                       "group; stage_busy_us = that stage's forward, backward and recompute "
                       "compute kernel time (communication excluded); "
                       "stage_bubble_ratio = 1 - busy/span. "
                       "comm_wait_us sums, per group kind, the time NCCL kernels waited for "
                       "peers (overlapping async waits add up).",
        "stragglers": [{"rank": r, "factor": f} for r, f in cfg.stragglers],
        "slow_groups": [{"kind": k, "factor": f} for k, f in cfg.slow_groups],
        "overlap_grad_reduce": cfg.overlap_grad_reduce,
        "launch_overhead_us": cfg.launch_overhead_us,
        "slow_gemm": cfg.slow_gemm,
        "recompute": {"granularity": cfg.recompute_granularity,
                      "num_layers": (cfg.recompute_num_layers
                                     if cfg.recompute_granularity == "full" else None),
                      "note": "full: every checkpoint's layers re-run their forward inside "
                              "CheckpointFunction.backward (custom_forward frames on the "
                              "autograd thread); selective: the core attention only. "
                              "timing.*.ranks.*.recompute_us sums those kernels' time; "
                              "kernel_flops_per_iteration leaves recomputation out"},
        "efficiency": {"model_flops_per_iteration": cost_model_flops_per_iteration(cfg),
                       "kernel_flops_per_iteration": kernel_flops_per_iteration(cfg),
                       "record_shapes": cfg.record_shapes,
                       "gpu": "NVIDIA H100 80GB HBM3 (h100_sxm), bf16",
                       "note": "model_config.json beside topology.json: Megatron's arguments "
                               "and these FLOPs, the cost model's GEMMs and causal attention "
                               "(forward, dgrad, wgrad; no recompute) per iteration (null "
                               "for MoE runs); kernel_flops_per_iteration: what the GEMM and "
                               "attention kernels run, the attention backward at 2.5x the "
                               "forward (its recompute counted); timed_kernel_flops_per_rank: "
                               "the same per rank, summed from the kernels the cost model "
                               "timed (MoE runs too)"},
        "pp_timer": {"iteration": pp_timer_iteration, "folder": "pp_timer_logs",
                     "note": "event_times_*.json as the Megatron patch's PP timer writes them "
                             "(ENABLE_PP_TIMER_ITER = this iteration); a pass runs from its "
                             "first compute-stream op's start to its last one's end, in ms "
                             "after the iteration's earliest forward start"},
        "ranks": ranks,
        "timing": {str(it): facts for it, facts in per_iteration.items()},
    }
