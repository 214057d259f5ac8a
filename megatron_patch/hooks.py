"""The two calls a Megatron-LM training script makes; everything else lives in this package.

* :func:`on_model_parallel_initialized` right after
  ``parallel_state.initialize_model_parallel`` (in Megatron-LM:
  ``megatron/training/initialize.py``, end of ``_initialize_distributed``):
  every rank checks its groups against the topology, rank 0 writes
  ``topology.json``, ``unique_parallel_groups_<timestamp>.txt`` and, given
  Megatron's arguments, ``model_config.json`` (the model and batch, for
  model FLOPs and MFU).
* :func:`build_profiler` where ``train()`` sets up ``--profile`` with
  ``--use-pytorch-profiler``: a ``torch.profiler.profile`` recording exactly
  the iterations [``--profile-step-start``, ``--profile-step-end``) on the
  profiled ranks (all of them with ``PROFILE_ALLRANKS``), or None.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracehouse.core.topology import DEFAULT_ORDER

from .model_config_dump import dump_model_config
from .profiling import (
    ProfilingConfig,
    cuda_sync_events_config,
    env_flag,
    make_schedule,
    make_trace_handler,
    should_profile,
)
from .topology_dump import (
    check_rank_groups,
    dump_topology,
    rank_groups_from_parallel_state,
    topology_from_parallel_state,
)

__all__ = ["build_profiler", "on_model_parallel_initialized", "profiled_ranks"]


def on_model_parallel_initialized(out_dir: Path | str | None, order: str = DEFAULT_ORDER,
                                  parallel_state: Any = None, args: Any = None) -> dict:
    """Check this rank's groups; on rank 0 dump the topology and model config into ``out_dir``.

    Args:
        out_dir: folder for the dump (Megatron's ``--tensorboard-dir``, where
            the traces go too); None checks without writing.
        order: Megatron's ``--order``.
        parallel_state: ``megatron.core.parallel_state`` (imported when None).
        args: Megatron-LM's parsed arguments (``get_args()``): rank 0 also
            writes ``model_config.json`` from them; None writes none.

    Returns the topology. A disagreement between Megatron's groups and the
    topology is a warning naming the rank and the group (never fatal to training).
    """
    import torch.distributed as dist

    if parallel_state is None:
        from megatron.core import parallel_state as imported

        parallel_state = imported
    topology = topology_from_parallel_state(parallel_state, order=order)
    rank = dist.get_rank()
    problems = check_rank_groups(topology, rank, rank_groups_from_parallel_state(parallel_state))
    for problem in problems:
        warnings.warn(f"tracehouse topology dump: {problem}", stacklevel=2)
    if rank == 0 and out_dir is not None:
        dump_topology(topology, out_dir)
        if args is not None:
            dump_model_config(args, out_dir)
    return topology


def profiled_ranks(profile_ranks: Sequence[int], world_size: int,
                   environ: Mapping[str, str] | None = None) -> list[int]:
    """``--profile-ranks``, or every rank when ``PROFILE_ALLRANKS`` is set."""
    if env_flag("PROFILE_ALLRANKS", environ):
        return list(range(world_size))
    return list(profile_ranks)


def build_profiler(rank: int, profile_ranks: Sequence[int], profile_step_start: int,
                   profile_step_end: int, out_dir: Path | str, first_iteration: int,
                   environ: Mapping[str, str] | None = None, with_cuda: bool = True) -> Any:
    """A started-nothing ``torch.profiler.profile`` for this rank, or None if it is not profiled.

    Call ``prof.start()`` before the training loop and ``prof.step()`` once
    per iteration. Profiler step ``s`` is taken to be iteration
    ``first_iteration + s``: in Megatron's ``train()``, ``prof.step()`` runs
    at the top of the loop, so pass ``iteration`` as it is before the loop
    (step ``s`` then runs the train step that completes iteration
    ``first_iteration + s``, Megatron's own numbering for
    ``--profile-step-start/end``).
    """
    import torch

    config = ProfilingConfig.from_env(profile_step_start, profile_step_end, environ)
    if not should_profile(rank, profile_ranks, config):
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if with_cuda and torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    options: dict[str, Any] = {}
    experimental = cuda_sync_events_config(config)
    if experimental is not None:  # cross-stream waits for the replay (PROFILER_CUDA_SYNC_EVENTS)
        options["experimental_config"] = experimental
    return torch.profiler.profile(
        activities=activities,
        schedule=make_schedule(config, first_iteration),
        on_trace_ready=make_trace_handler(out_dir, rank, config, first_iteration),
        record_shapes=True,
        with_stack=True,
        **options,
    )
