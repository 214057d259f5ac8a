"""PP-timer logs of a simulated run, as the Megatron patch's PP timer would write them.

Why: the demo and the reports chart PP-timer data (``fct_pp_timer_events``);
a simulated run already knows when every forward and backward pass of every
microbatch ran on every rank, so it writes the same
``event_times_PP*_VPP*_TPxCPxDP_rank_*_pp_rank_*_rank_*.json`` files
(through :func:`tracehouse.megatron_patch.pp_timer.write_event_times`, the
one writer of the format) into ``<run>/pp_timer_logs/``, the patch's default
folder, for one iteration (the one ``ENABLE_PP_TIMER_ITER`` would name).

What a mark means here: the real timer records a CUDA event on the compute
stream before and after ``forward_step`` / ``backward_step``; its time is
when the stream gets there. The simulated pass starts at its first
compute-stream op (kernel or memcpy/memset) and ends at its last one's end;
communication launched inside the pass (tensor-parallel collectives,
gradient reduce-scatters) runs on other streams and is not bracketed, as
with CUDA events. The origin is the barrier the real timer takes first:
one instant for every rank, the iteration's earliest forward start, so all
times are >= 0 and ranks line up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracehouse.core.pp_timer_format import RankInfo, event_key, write_event_times

from .config import SimConfig
from .program import KERNEL, MEMOP
from .timing import StageTimes, Timeline
from .training import StageProgram

LOG_FOLDER = "pp_timer_logs"
CLOCK = "simulated"


def _pass_times(program: StageProgram, times: StageTimes,
                ) -> list[tuple[str, int, int, np.ndarray, np.ndarray]]:
    """(phase, chunk, microbatch, start_us, end_us) of each pass, arrays over positions."""
    ops = program.tape.ops
    out = []
    for phase, chunk, mb, first, end in program.tape.passes:
        compute = [i for i in range(first, end) if ops[i].kind in (KERNEL, MEMOP)]
        if not compute:
            raise AssertionError(f"{phase} pass of chunk {chunk} microbatch {mb} launched no "
                                 "compute-stream op")
        out.append((phase, chunk, mb, np.nanmin(times.start[compute], axis=0),
                    np.nanmax(times.end[compute], axis=0)))
    return out


def write_pp_timer_logs(out_dir: Path, cfg: SimConfig, topology: dict, timeline: Timeline,
                        times: list[StageTimes], programs: list[StageProgram],
                        iteration: int) -> list[Path]:
    """Write every rank's PP-timer file for ``iteration``; return their paths."""
    per_stage = [_pass_times(programs[s], times[s]) for s in range(cfg.pp)]
    origin = min(float(start.min()) for stage in per_stage for phase, _c, _m, start, _e in stage
                 if phase == "forward")
    tp_cp_dp = {rank: group.index(rank) for group in topology["groups"]["tp_dp_cp"]
                for rank in group}
    vpp = cfg.vpp if cfg.vpp > 1 else 1
    folder = out_dir / LOG_FOLDER
    paths = []
    for s, passes in enumerate(per_stage):
        for pos, rank in enumerate(timeline.stage_ranks[s].tolist()):
            info = RankInfo(global_rank=int(rank), pp_rank=s, pp_size=cfg.pp, vpp_size=vpp,
                            tp_cp_dp_rank=tp_cp_dp[int(rank)], world_size=cfg.world)
            events: list[tuple[str, float]] = []
            for phase, chunk, mb, start, end in passes:
                key_chunk = chunk if vpp > 1 else None
                events.append((event_key(phase, key_chunk, mb, "start"),
                               (float(start[pos]) - origin) / 1000.0))
                events.append((event_key(phase, key_chunk, mb, "end"),
                               (float(end[pos]) - origin) / 1000.0))
            total_ms = (float(times[s].schedule_end[pos]) - origin) / 1000.0
            total_ms = max([total_ms, *(ms for _key, ms in events)])
            paths.append(write_event_times(folder, info, events, total_ms, iteration=iteration,
                                           clock=CLOCK, microbatches=cfg.microbatches))
    return paths
