"""The PP timer module (megatron_patch/pp_timer.py) on CPU.

CUDA events need a GPU, so these tests use the module's CPU clock seam
(:class:`PerfCounterClock`, or a counting clock to prove that "off" does no
work). The schedule drivers below call the timer exactly as the patched
``schedules.py`` does (same microbatch formulas), with functions that
really sleep, and check the file the original's ``plot.py`` and tracehouse
ingest read.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tracehouse.megatron_patch import pp_timer
from tracehouse.megatron_patch.pp_timer import (
    META_KEY,
    PerfCounterClock,
    PPTimer,
    RankInfo,
    TimerConfig,
    event_times_filename,
)

INFO = RankInfo(global_rank=5, pp_rank=1, pp_size=4, vpp_size=1, tp_cp_dp_rank=2, world_size=16)


class CountingClock(PerfCounterClock):
    """The CPU clock, counting marks and syncs (what a CUDA event / sync would cost)."""

    created = 0
    marks = 0
    syncs = 0

    def __init__(self) -> None:
        CountingClock.created += 1

    def mark(self) -> int:
        CountingClock.marks += 1
        return super().mark()

    def synchronize(self) -> None:
        CountingClock.syncs += 1


@pytest.fixture(autouse=True)
def reset_counts() -> None:
    CountingClock.created = CountingClock.marks = CountingClock.syncs = 0


def work(*_args: Any, **_kwargs: Any) -> str:
    time.sleep(0.0005)
    return "out"


def run_1f1b(timer: PPTimer, pp: int, pp_rank: int, m: int) -> None:
    """megatron-core's forward_backward_pipelining_without_interleaving, as patched."""
    warmup = min(pp - pp_rank - 1, m)
    remaining = m - warmup
    for i in range(warmup):
        assert timer.timed(work, "forward", microbatch=i)(None) == "out"
    for i in range(remaining):
        timer.timed(work, "forward", microbatch=i + warmup)(None)
        timer.timed(work, "backward", microbatch=i)(None)
    for i in range(warmup):
        timer.timed(work, "backward", microbatch=i + remaining)(None)


def plot_py_accepts(path: Path, pp: int, vpp: int) -> dict[str, float]:
    """What the original plot.py does with a file: its name filter, then its key checks."""
    pattern = rf"^event_times_PP{pp}_VPP{vpp}_TPxCPxDP_rank_\d+_pp_rank_\d+_rank_\d+\.json$"
    assert re.match(pattern, path.name), path.name
    events = json.loads(path.read_text())
    ops = {}
    for name, value in events.items():
        if name.startswith(("forward-", "backward-")):
            parts = name.split("-")
            assert len(parts) == (3 if vpp == 1 else 4), name
            assert parts[-1] in ("start", "end") and all(p.isdigit() for p in parts[1:-1])
            ops[name] = float(value)
    return ops


def test_off_does_no_work(tmp_path: Path) -> None:
    barriers: list[int] = []
    for env in ({}, {"ENABLE_PP_TIMER": "0"},
                {"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "7"}):
        timer = PPTimer(CountingClock, {**env, "PP_TIMER_LOG_DIR": str(tmp_path)})
        assert not timer.start_step(3, rank_info=INFO, barrier=lambda: barriers.append(1))
        assert timer.timed(work, "forward", microbatch=0) is work
        assert timer.timed(work, "backward") is work
        assert timer.finish_step() is None
    assert (CountingClock.created, CountingClock.marks, CountingClock.syncs) == (0, 0, 0)
    assert barriers == [] and list(tmp_path.iterdir()) == []


def test_1f1b_file(tmp_path: Path) -> None:
    env = {"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "3", "PP_TIMER_LOG_DIR": str(tmp_path)}
    timer = PPTimer(CountingClock, env)
    barriers: list[int] = []
    assert timer.start_step(3, rank_info=INFO, barrier=lambda: barriers.append(1))
    run_1f1b(timer, pp=4, pp_rank=1, m=6)
    path = timer.finish_step()
    assert path == tmp_path / "event_times_PP4_VPP1_TPxCPxDP_rank_2_pp_rank_1_rank_5.json"
    assert barriers == [1] and CountingClock.syncs == 1
    assert CountingClock.marks == 2 + 4 * 6  # start, end, and two per forward/backward
    doc = json.loads(path.read_text())
    ops = plot_py_accepts(path, 4, 1)
    assert set(ops) == {f"{phase}-{mb}-{edge}" for phase in ("forward", "backward")
                        for mb in range(6) for edge in ("start", "end")}
    for phase in ("forward", "backward"):
        for mb in range(6):
            assert 0 <= ops[f"{phase}-{mb}-start"] < ops[f"{phase}-{mb}-end"]
    # Backward of a microbatch follows its forward; the schedule order is kept.
    assert all(ops[f"forward-{mb}-end"] <= ops[f"backward-{mb}-start"] for mb in range(6))
    # pp_rank 1 of 4: two warm-up forwards, then forward 2, backward 0, forward 3, ...
    assert ops["forward-1-end"] <= ops["forward-2-start"] < ops["forward-2-end"] \
        <= ops["backward-0-start"] < ops["backward-0-end"] <= ops["forward-3-start"]
    assert doc["total-execution-time"] >= max(ops.values())
    assert doc[META_KEY] == {
        "format": pp_timer.FORMAT, "iteration": 3, "rank": 5, "pp_rank": 1, "pp_size": 4,
        "vpp_size": 1, "tp_cp_dp_rank": 2, "world_size": 16, "microbatches": 6,
        "clock": "cpu_perf_counter", "unit": "ms",
    }
    assert not timer.active and timer.finish_step() is None


def test_interleaved_keys_and_backward_counting(tmp_path: Path) -> None:
    info = RankInfo(global_rank=1, pp_rank=1, pp_size=2, vpp_size=2, tp_cp_dp_rank=0)
    timer = PPTimer(PerfCounterClock, {"ENABLE_PP_TIMER": "yes", "ENABLE_PP_TIMER_ITER": "0",
                                       "PP_TIMER_LOG_DIR": str(tmp_path)})
    assert timer.start_step(0, rank_info=info, barrier=lambda: None)
    # megatron-core's schedule table for m=4, v=2, group=pp=2: forward order by chunk.
    order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    for chunk, mb in order:
        timer.timed(work, "forward", chunk, mb)()
    for chunk, _mb in order:  # backward: chunk ids reversed, no microbatch id known
        timer.timed(work, "backward", 1 - chunk)()
    path = timer.finish_step()
    assert path is not None and path.name == event_times_filename(info)
    ops = plot_py_accepts(path, 2, 2)
    assert set(ops) == {f"{phase}-{chunk}-{mb}-{edge}" for phase in ("forward", "backward")
                        for chunk in range(2) for mb in range(4) for edge in ("start", "end")}
    # Backward microbatches are numbered per chunk in call order.
    assert ops["backward-1-0-start"] < ops["backward-1-1-start"] < ops["backward-0-0-start"]
    assert json.loads(path.read_text())[META_KEY]["microbatches"] == 4


@pytest.mark.parametrize(("env", "expected", "source"), [
    ({"PP_TIMER_LOG_DIR": "a"}, "a", "PP_TIMER_LOG_DIR"),
    ({"PP_TIMIER_LOG_DIR": "b"}, "b", "PP_TIMIER_LOG_DIR"),
    ({"PP_TIMER_LOG_DIR": "a", "PP_TIMIER_LOG_DIR": "b"}, "a", "PP_TIMER_LOG_DIR"),
    ({"PP_TIMER_LOG_DIR": "", "PP_TIMIER_LOG_DIR": "b"}, "b", "PP_TIMIER_LOG_DIR"),
    ({}, "tb/pp_timer_logs", "default"),
])
def test_log_dir_variables(env: dict[str, str], expected: str, source: str) -> None:
    config = TimerConfig.from_env(env, default_log_dir="tb/pp_timer_logs")
    assert (config.log_dir, config.log_dir_from) == (Path(expected), source)


def test_original_default_dir_and_iteration() -> None:
    config = TimerConfig.from_env({"ENABLE_PP_TIMER": "1"})
    assert config.log_dir == Path("pp_timer_logs") and config.iteration == 10 and config.enabled
    with pytest.warns(UserWarning, match="ENABLE_PP_TIMER_ITER"):
        bad = TimerConfig.from_env({"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "ten"})
    assert not bad.enabled


def test_misspelt_variable_writes_there(tmp_path: Path) -> None:
    timer = PPTimer(PerfCounterClock, {"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "1",
                                       "PP_TIMIER_LOG_DIR": str(tmp_path / "typo")})
    timer.start_step(1, rank_info=INFO, barrier=lambda: None, default_log_dir=tmp_path / "d")
    run_1f1b(timer, pp=4, pp_rank=1, m=2)
    path = timer.finish_step()
    assert path is not None and path.parent == tmp_path / "typo"
    assert not (tmp_path / "d").exists()


def test_exception_in_step_still_closes_the_mark(tmp_path: Path) -> None:
    timer = PPTimer(PerfCounterClock, {"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "2",
                                       "PP_TIMER_LOG_DIR": str(tmp_path)})
    timer.start_step(2, rank_info=INFO, barrier=lambda: None)

    def boom() -> None:
        raise RuntimeError("step failed")

    with pytest.raises(RuntimeError):
        timer.timed(boom, "forward", microbatch=0)()
    with pytest.raises(ValueError, match="phase"):
        timer.timed(work, "optimizer")
    path = timer.finish_step()
    assert path is not None
    assert {"forward-0-start", "forward-0-end"} <= set(json.loads(path.read_text()))


def test_rank_info_from_megatron_parallel_state() -> None:
    """The file name's coordinates come from megatron-core's own groups (fake process group)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_state = pytest.importorskip("megatron.core.parallel_state")
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    from tracehouse.core.topology import build_topology

    world, tp, pp, vpp = 16, 2, 4, 2
    topology = build_topology(world, tp, pp, 1, 1, None, vpp)
    for rank in (0, 5, 11):
        dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=rank, world_size=world)
        try:
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp, create_gloo_process_groups=False)
            info = pp_timer.rank_info_from_parallel_state(parallel_state)
        finally:
            parallel_state.destroy_model_parallel()
            dist.destroy_process_group()
        coords = topology["ranks"][str(rank)]
        pp_group = next(g for g in topology["groups"]["pp"] if rank in g)
        tp_dp_cp = next(g for g in topology["groups"]["tp_dp_cp"] if rank in g)
        assert (info.global_rank, info.pp_size, info.vpp_size, info.world_size) == (
            rank, pp, vpp, world)
        assert info.pp_rank == pp_group.index(rank) == coords["pp"]
        assert info.tp_cp_dp_rank == tp_dp_cp.index(rank)
