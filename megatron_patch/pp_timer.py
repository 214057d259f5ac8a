"""The PP timer: per-microbatch forward/backward times of one iteration, per pipeline rank.

What it records (the seed's Megatron-LM commit ``ad3bc3a``, redone): for one
training iteration, every rank takes a timing mark before and after each
``forward_step`` / ``backward_step`` of the pipeline schedule and writes

    <log dir>/event_times_PP{pp}_VPP{vpp}_TPxCPxDP_rank_{r}_pp_rank_{p}_rank_{global}.json

holding, for each microbatch, ``forward-{mb}-start|end`` and
``backward-{mb}-start|end`` (1F1B) or ``forward-{chunk}-{mb}-start|end`` and
``backward-{chunk}-{mb}-start|end`` (interleaved, ``mb`` counted within the
model chunk), float milliseconds after the rank's start mark (taken right
after a barrier), plus ``total-execution-time``. ``r`` is the rank in the
tensor x context x data-parallel group, ``VPP`` is 1 without interleaving.
That is the original's file, so its ``plot.py`` reads ours.

Metadata for tracehouse: one extra key, ``"tracehouse"``, holds an object
(format, iteration, global rank, pp/vpp/world sizes, microbatches, clock,
unit). ``plot.py`` only reads keys that start with ``forward-`` or
``backward-`` (its interleaved loader asserts the shape of exactly those),
so it ignores this key; tracehouse's ingest reads it to fill ``iteration``
and ``rank`` without guessing.

Switches (environment, read at the start of every train step, so a job can
be told without a restart of the code path):

* ``ENABLE_PP_TIMER=1`` turns it on (``1``/``true``/``yes``/``on``);
* ``ENABLE_PP_TIMER_ITER=N`` (default 10): the iteration to time, Megatron's
  ``args.curr_iteration`` (completed iterations before this step), the same
  numbering as ``--profile-step-start`` and the ``iteration_N`` trace folders;
* ``PP_TIMER_LOG_DIR`` (the README's name) or ``PP_TIMIER_LOG_DIR`` (the
  misspelt name the original code actually read). When both are set,
  ``PP_TIMER_LOG_DIR`` wins: it is the documented name, and the typo is only
  accepted so that old launch scripts keep working. Neither set: the
  ``default_log_dir`` the caller passes (the patch passes
  ``<--tensorboard-dir>/pp_timer_logs``), else ``./pp_timer_logs`` (the
  original's default).

Differences from the original, on purpose:

* off costs nothing: :func:`timed` returns the function itself, so no CUDA
  event is allocated or recorded and no host sync happens (the original's
  interleaved schedule allocated and recorded its event pool every
  iteration, and its 1F1B warm-up forced a ``.item()`` sync);
* tokens are not counted here at all (the original added warm-up tokens a
  second time);
* backward microbatch ids are counted per model chunk when the caller does
  not know them (megatron-core's interleaved helper has no backward id):
  backward passes of a chunk run in the order of its forwards (FIFO).

Testability: the timing marks come from a :class:`Clock`. Training uses
:class:`CudaEventClock` (timing-enabled ``torch.cuda.Event``); tests and CPU
runs use :class:`PerfCounterClock`. Everything else (keys, numbering, the
file) is the same code either way.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tracehouse.core.pp_timer_format import (
    FORMAT,
    META_KEY,
    RankInfo,
    event_key,
    event_times_filename,
    write_event_times,
)

__all__ = [
    "DEFAULT_ITERATION",
    "FORMAT",
    "META_KEY",
    "Clock",
    "CudaEventClock",
    "PPTimer",
    "PerfCounterClock",
    "RankInfo",
    "TimerConfig",
    "event_key",
    "event_times_filename",
    "finish_step",
    "start_step",
    "timed",
    "write_event_times",
]

ENV_ENABLE = "ENABLE_PP_TIMER"
ENV_ITERATION = "ENABLE_PP_TIMER_ITER"
ENV_LOG_DIR = "PP_TIMER_LOG_DIR"
ENV_LOG_DIR_TYPO = "PP_TIMIER_LOG_DIR"  # what the original code read
DEFAULT_ITERATION = 10
DEFAULT_LOG_DIR = "pp_timer_logs"
PHASES = ("forward", "backward")
_TRUE = frozenset({"1", "true", "yes", "on"})

F = TypeVar("F", bound=Callable[..., Any])


class Clock(Protocol):
    """Where timing marks come from: CUDA events in training, a CPU clock in tests."""

    name: str

    def mark(self) -> Any:
        """Record a mark now (on the GPU stream for CUDA); return its handle."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds from mark ``start`` to mark ``end`` (after :meth:`synchronize`)."""

    def synchronize(self) -> None:
        """Wait until every mark has a time (one host sync per timed iteration)."""


class CudaEventClock:
    """Timing-enabled ``torch.cuda.Event``\\ s on the current stream, like the original."""

    name = "cuda_event"

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def mark(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()


class PerfCounterClock:
    """The CPU's monotonic clock: the stand-in for CUDA events on CPU-only runs and tests."""

    name = "cpu_perf_counter"

    def mark(self) -> int:
        return time.perf_counter_ns()

    def elapsed_ms(self, start: int, end: int) -> float:
        return (end - start) / 1e6

    def synchronize(self) -> None:
        return None


def default_clock() -> Clock:
    """CUDA events when CUDA is available, else the CPU clock."""
    try:
        import torch
    except ImportError:
        return PerfCounterClock()
    return CudaEventClock() if torch.cuda.is_available() else PerfCounterClock()


def rank_info_from_parallel_state(parallel_state: Any = None,
                                  vpp_size: int | None = None) -> RankInfo:
    """This rank's :class:`RankInfo` from megatron-core's ``parallel_state``.

    ``tp_cp_dp_rank`` is the rank in ``get_tensor_and_data_parallel_group(
    with_context_parallel=True)``, as in the original file name.
    """
    import torch.distributed as dist

    if parallel_state is None:
        from megatron.core import parallel_state as imported

        parallel_state = imported
    if vpp_size is None:
        vpp_size = parallel_state.get_virtual_pipeline_model_parallel_world_size()
    group = parallel_state.get_tensor_and_data_parallel_group(with_context_parallel=True)
    return RankInfo(
        global_rank=dist.get_rank(),
        pp_rank=parallel_state.get_pipeline_model_parallel_rank(),
        pp_size=parallel_state.get_pipeline_model_parallel_world_size(),
        vpp_size=int(vpp_size or 1),
        tp_cp_dp_rank=dist.get_rank(group=group),
        world_size=dist.get_world_size(),
    )


@dataclass(frozen=True)
class TimerConfig:
    """The environment's switches, resolved."""

    enabled: bool
    iteration: int
    log_dir: Path
    log_dir_from: str  # which variable (or "default") gave log_dir

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 default_log_dir: Path | str | None = None) -> TimerConfig:
        """Read the switches; a bad ``ENABLE_PP_TIMER_ITER`` warns and turns the timer off."""
        env = os.environ if environ is None else environ
        enabled = env.get(ENV_ENABLE, "").strip().lower() in _TRUE
        raw = env.get(ENV_ITERATION, str(DEFAULT_ITERATION)).strip()
        try:
            iteration = int(raw)
        except ValueError:
            if enabled:
                warnings.warn(f"{ENV_ITERATION}={raw!r} is not an integer; PP timer off",
                              stacklevel=2)
            enabled, iteration = False, DEFAULT_ITERATION
        if env.get(ENV_LOG_DIR):
            log_dir, source = Path(env[ENV_LOG_DIR]), ENV_LOG_DIR
        elif env.get(ENV_LOG_DIR_TYPO):
            log_dir, source = Path(env[ENV_LOG_DIR_TYPO]), ENV_LOG_DIR_TYPO
        else:
            log_dir = Path(default_log_dir) if default_log_dir else Path(DEFAULT_LOG_DIR)
            source = "default"
        return cls(enabled=enabled, iteration=iteration, log_dir=log_dir, log_dir_from=source)


@dataclass
class _Step:
    """The state of the one iteration being timed."""

    iteration: int
    info: RankInfo
    log_dir: Path
    clock: Clock
    start: Any
    marks: list[tuple[str, Any]] = field(default_factory=list)
    counts: dict[tuple[str, int], int] = field(default_factory=dict)
    microbatches: set[tuple[int, int]] = field(default_factory=set)


class PPTimer:
    """One rank's PP timer. The patch uses the module-level instance via
    :func:`start_step`, :func:`timed` and :func:`finish_step`."""

    def __init__(self, clock_factory: Callable[[], Clock] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self._clock_factory = clock_factory or default_clock
        self._environ = environ
        self._step: _Step | None = None
        self.last_path: Path | None = None

    @property
    def active(self) -> bool:
        """True between a :meth:`start_step` that matched and its :meth:`finish_step`."""
        return self._step is not None

    def start_step(self, iteration: int, *, vpp_size: int | None = None,
                   default_log_dir: Path | str | None = None, rank_info: RankInfo | None = None,
                   barrier: Callable[[], None] | None = None) -> bool:
        """Call before the train step's ``forward_backward_func``; True if this step is timed.

        When off, or for any other iteration, this only reads three
        environment variables. When on: every rank waits at a barrier
        (``torch.distributed.barrier`` unless ``barrier`` is given) so the
        ranks' start marks line up, then takes the start mark.
        """
        self._step = None
        config = TimerConfig.from_env(self._environ, default_log_dir)
        if not config.enabled or iteration != config.iteration:
            return False
        info = rank_info if rank_info is not None else rank_info_from_parallel_state(
            vpp_size=vpp_size)
        if barrier is None:
            import torch.distributed as dist

            barrier = dist.barrier if dist.is_available() and dist.is_initialized() else None
        if barrier is not None:
            barrier()
        clock = self._clock_factory()
        self._step = _Step(iteration=iteration, info=info, log_dir=config.log_dir, clock=clock,
                           start=clock.mark())
        return True

    def timed(self, fn: F, phase: str, chunk: int | None = None,
              microbatch: int | None = None) -> F:
        """``fn`` itself when not timing; else ``fn`` between two marks.

        ``chunk``: the model chunk (``vp_stage``), used in the key only with
        VPP > 1. ``microbatch``: the microbatch within the chunk; None counts
        calls of this phase and chunk (0, 1, ...), which is right for
        backward passes because a chunk's backwards run in forward order.
        """
        step = self._step
        if step is None:
            return fn
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, not {phase!r}")
        chunk_index = int(chunk or 0)
        counter = (phase, chunk_index)
        mb = step.counts.get(counter, 0) if microbatch is None else int(microbatch)
        step.counts[counter] = max(step.counts.get(counter, 0), mb + 1)
        step.microbatches.add((chunk_index, mb))
        key_chunk = chunk_index if step.info.vpp_size > 1 else None

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            step.marks.append((event_key(phase, key_chunk, mb, "start"), step.clock.mark()))
            try:
                return fn(*args, **kwargs)
            finally:
                step.marks.append((event_key(phase, key_chunk, mb, "end"), step.clock.mark()))

        return timed_call  # type: ignore[return-value]

    def finish_step(self) -> Path | None:
        """Call after ``forward_backward_func``: sync once, write the file; its path, or None."""
        step = self._step
        if step is None:
            return None
        self._step = None
        end = step.clock.mark()
        step.clock.synchronize()
        events = [(key, step.clock.elapsed_ms(step.start, mark)) for key, mark in step.marks]
        per_chunk = {c for c, _ in step.microbatches}
        final = write_event_times(
            step.log_dir, step.info, events, step.clock.elapsed_ms(step.start, end),
            iteration=step.iteration, clock=step.clock.name,
            microbatches=(len(step.microbatches) // len(per_chunk)) if per_chunk else 0)
        self.last_path = final
        return final


#: The rank's timer, used by the patch's calls below.
TIMER = PPTimer()


def start_step(iteration: int, *, vpp_size: int | None = None,
               default_log_dir: Path | str | None = None) -> bool:
    """:meth:`PPTimer.start_step` of the rank's timer (called from ``train_step``)."""
    return TIMER.start_step(iteration, vpp_size=vpp_size, default_log_dir=default_log_dir)


def timed(fn: F, phase: str, chunk: int | None = None, microbatch: int | None = None) -> F:
    """:meth:`PPTimer.timed` of the rank's timer (called in ``schedules.py``)."""
    return TIMER.timed(fn, phase, chunk, microbatch)


def finish_step() -> Path | None:
    """:meth:`PPTimer.finish_step` of the rank's timer (called from ``train_step``)."""
    return TIMER.finish_step()
