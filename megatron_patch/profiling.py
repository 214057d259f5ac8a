"""All-rank profiling for Megatron-LM: one Kineto trace per rank per iteration.

Why: Megatron-TraceViz's patch used ``schedule(wait, warmup, active=1,
repeat=0)``; ``repeat=0`` repeats forever, so it dumped a trace every
wait+warmup+1 steps until ``--profile-step-end`` and ignored
``--profile-step-start``. Here the schedule records exactly the iterations
``profile_step_start <= it < profile_step_end`` (Megatron's own convention:
``active = end - start``), one trace each, after ``PROFILER_WARMUP_STEPS``
warm-up steps, and nothing after.

Environment variables:

* ``PROFILE_ALLRANKS`` (``1``/``true``/``yes``/``on``): profile every rank,
  not only ``--profile-ranks``.
* ``PROFILER_WAIT_STEPS`` (default 0): idle steps before the warm-up; only
  shortens the warm-up window when the run starts late.
* ``PROFILER_WARMUP_STEPS`` (default 1): steps traced and discarded before
  the first recorded iteration (clamped to the steps available).
* ``PROFILER_GZIP`` (same truthy values): write ``.pt.trace.json.gz``.
* ``PROFILER_CUDA_SYNC_EVENTS`` (default on; ``0``/``false``/``no``/``off``
  turns it off): ask Kineto for CUDA synchronization events (see
  :func:`cuda_sync_events_config`).

Traces land in ``<dir>/iteration_N/rank_XXXX_iter_N.pt.trace.json[.gz]``,
the layout ``tracehouse ingest`` recognises.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ProfilingConfig",
    "cuda_sync_events_config",
    "env_flag",
    "make_schedule",
    "make_trace_handler",
    "should_profile",
    "trace_path",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when the variable is set to 1, true, yes or on (any case)."""
    value = (os.environ if environ is None else environ).get(name, "")
    return value.strip().lower() in _TRUE


def _env_on_unless_off(name: str, environ: Mapping[str, str]) -> bool:
    """True unless the variable is set to 0, false, no or off (any case): a default-on switch."""
    return environ.get(name, "").strip().lower() not in _FALSE


def _env_int(name: str, default: int, environ: Mapping[str, str]) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not an integer") from exc
    if value < 0:
        raise ValueError(f"{name}={raw!r} must be 0 or more")
    return value


@dataclass(frozen=True)
class ProfilingConfig:
    """What to profile: the iterations [start, end), warm-up, where, compressed or not."""

    start: int
    end: int
    wait: int = 0
    warmup: int = 1
    all_ranks: bool = False
    gzip: bool = False
    cuda_sync_events: bool = True

    def __post_init__(self) -> None:
        if self.start < 0 or self.end <= self.start:
            raise ValueError(
                f"--profile-step-end ({self.end}) must be greater than --profile-step-start "
                f"({self.start}), and the start 0 or more"
            )

    @classmethod
    def from_env(cls, start: int, end: int,
                 environ: Mapping[str, str] | None = None) -> ProfilingConfig:
        """The config for Megatron's ``--profile-step-start/--profile-step-end`` and the env."""
        env = os.environ if environ is None else environ
        return cls(
            start=start, end=end,
            wait=_env_int("PROFILER_WAIT_STEPS", 0, env),
            warmup=_env_int("PROFILER_WARMUP_STEPS", 1, env),
            all_ranks=env_flag("PROFILE_ALLRANKS", env),
            gzip=env_flag("PROFILER_GZIP", env),
            cuda_sync_events=_env_on_unless_off("PROFILER_CUDA_SYNC_EVENTS", env),
        )


def cuda_sync_events_config(config: ProfilingConfig, factory: Any = None) -> Any | None:
    """The ``experimental_config`` that makes Kineto record CUDA sync events, or None.

    Why: the what-if replay (``fct_step_replay``) and HTA's critical path take
    cross-stream waits and host syncs from Kineto's ``cuda_sync`` rows
    ("Stream Wait Event", "Event Sync", with
    ``wait_on_cuda_event_record_corr_id``), and ``torch.profiler`` writes them
    only when ``_ExperimentalConfig(enable_cuda_sync_events=True)`` is passed
    (PyTorch >= 2.1; off by default; stock Megatron-LM passes none). Without
    them the replay falls back to stream order and launches and says so
    (``has_recorded_syncs``).

    None when ``PROFILER_CUDA_SYNC_EVENTS`` is off or the installed PyTorch
    has no such field (older releases: the profiler then runs as before).
    ``factory`` is the config class (``torch._C._profiler._ExperimentalConfig``
    when None).
    """
    if not config.cuda_sync_events:
        return None
    if factory is None:
        try:
            from torch._C._profiler import _ExperimentalConfig as factory
        except ImportError:
            return None
    try:
        return factory(enable_cuda_sync_events=True)
    except TypeError:  # a PyTorch from before the field (pytorch PR #105187, 2.1)
        return None


def should_profile(rank: int, profile_ranks: Sequence[int], config: ProfilingConfig) -> bool:
    """Profile this rank? Every rank with ``PROFILE_ALLRANKS``, else ``--profile-ranks``."""
    return config.all_ranks or rank in profile_ranks


def make_schedule(config: ProfilingConfig, first_iteration: int) -> Callable[[int], Any]:
    """A ``torch.profiler`` schedule recording exactly iterations [start, end).

    ``first_iteration`` is the iteration the first profiled step runs
    (``args.iteration + 1`` when the profiler starts before the training
    loop): step ``s`` of the profiler is iteration ``first_iteration + s``.
    Each recorded iteration is saved on its own (RECORD_AND_SAVE back to
    back), so the trace handler writes one file per iteration.
    """
    from torch.profiler import ProfilerAction

    warmup_from = max(first_iteration, config.start - config.warmup)

    def schedule(step: int) -> ProfilerAction:
        iteration = first_iteration + step
        if config.start <= iteration < config.end:
            return ProfilerAction.RECORD_AND_SAVE
        if warmup_from <= iteration < config.start:
            return ProfilerAction.WARMUP
        return ProfilerAction.NONE

    return schedule


def trace_path(out_dir: Path | str, rank: int, iteration: int, compress: bool) -> Path:
    """``<out_dir>/iteration_N/rank_XXXX_iter_N.pt.trace.json[.gz]``."""
    suffix = ".pt.trace.json.gz" if compress else ".pt.trace.json"
    return Path(out_dir) / f"iteration_{iteration}" / f"rank_{rank:04d}_iter_{iteration}{suffix}"


def make_trace_handler(out_dir: Path | str, rank: int, config: ProfilingConfig,
                       first_iteration: int) -> Callable[[Any], Path]:
    """``on_trace_ready`` writing each recorded iteration to :func:`trace_path`.

    The iteration is the profiler's step number mapped as in
    :func:`make_schedule` (the step that just finished), not a counter
    guessed from the training loop. Files are written to a temporary and
    renamed, so ingest never reads half a trace.
    """

    def handler(prof: Any) -> Path:
        iteration = first_iteration + prof.step_num - 1
        final = trace_path(out_dir, rank, iteration, config.gzip)
        final.parent.mkdir(parents=True, exist_ok=True)
        raw = final.with_name(f".{final.name}.json.tmp")
        prof.export_chrome_trace(str(raw))
        if config.gzip:
            packed = final.with_name(f".{final.name}.tmp")
            with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            raw.unlink()
            packed.replace(final)
        else:
            raw.replace(final)
        return final

    return handler
