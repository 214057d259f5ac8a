"""Synthetic Megatron-LM runs as real-format Kineto traces (``tracehouse simulate``).

Why: users need to try tracehouse before they have a trace, benchmarks need
runs of any size, and end-to-end tests need runs whose right answer is
known. A simulated run has the structure of a real megatron-core GPU run
(schedule call tree, threads, kernels, NCCL args, process groups) and timing
that follows from the schedule's dependencies; ``ground_truth.json`` says
what was injected.

Modules: :mod:`.config` (the run), :mod:`tracehouse.core.topology` (the groups),
:mod:`.program` / :mod:`.builder` (a stage's CPU tape and GPU ops),
:mod:`.schedules` / :mod:`.model` / :mod:`.training` (megatron-core's
train step, replayed), :mod:`.costs` (durations), :mod:`.timing` (the
discrete-event model), :mod:`.writer` (Kineto JSON), :mod:`.run`
(orchestration), :mod:`.calltree` (the schedule call tree of any trace).
"""

from __future__ import annotations

from .config import SCHEDULES, SimConfig, parse_slow_group, parse_straggler
from .run import SimulatedRun, simulate_run, trace_path

__all__ = ["SCHEDULES", "SimConfig", "SimulatedRun", "parse_slow_group", "parse_straggler",
           "simulate_run", "trace_path"]
