"""One real warehouse for the report tests, built once per pytest session.

The report tests of six files (the page, the chart families, the summary
marts, compare, the browser check and the README's examples) read the same
runs, and one ``dbt build`` over all of them is most of their cost.
:func:`build_report_warehouse` builds it; conftest's session fixture
``report_wh`` calls it on first use and holds it read-only (reports go to
each test's own folder).

Runs, all through the real ingest and dbt build:

* ``sim_a`` — simulated TP2 × PP2, 2 iterations, rank 1 slowed 1.5×;
* ``sim_b`` — the same without the straggler, for the comparison;
* ``hostile`` — two hand-written Kineto JSON traces whose kernels are named
  ``<script>alert(1)</script>`` and ``void f<"a" & 'b'>(int)``;
* ``cpu_ops`` — two hand-written Kineto traces with a ProfilerStep and CPU
  ops but neither kernels nor Megatron step frames (a run with no timings:
  fct_run_summary.timing_source ``none``);
* ``dlrm_8rank`` and ``tp1_pp4_dp2`` — the real shared traces (GPU and
  CPU-only), present only when ``../shared/data`` is.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_DATA, query_warehouse

HOSTILE_KERNEL = "<script>alert(1)</script>"
QUOTED_KERNEL = "void f<\"a\" & 'b'>(int)"

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"
MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu" / "tp1_pp4_dp2"
NSYS_H100 = SHARED_DATA / "nsys" / "h100_2gpu_1s.sqlite"


@dataclass
class ReportWarehouse:
    """The built warehouse and which runs it holds."""

    root: Path
    runs: list[str] = field(default_factory=list)

    def rows(self, sql: str,
             params: Sequence[Any] | Mapping[str, Any] | None = None) -> list[tuple]:
        """Rows of ``sql`` on the warehouse, opened read-only (conftest.query_warehouse)."""
        return query_warehouse(self.root, sql, params)

    def need(self, run: str) -> str:
        """``run``, or skip the test when its traces were not available."""
        if run not in self.runs:
            pytest.skip(f"run {run} not loaded (shared traces missing under {SHARED_DATA})")
        return run


def hostile_trace(rank: int, world: int) -> dict:
    """A Kineto trace: a step launching a GEMM, two hostile kernels and an all-reduce."""
    events: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 10,
         "ts": 0.0, "dur": 1000.0},
    ]
    kernels = [("ampere_sgemm_128x64_nn", 100.0, 300.0 + 50 * rank, None),
               (HOSTILE_KERNEL, 450.0, 100.0, None),
               (QUOTED_KERNEL, 560.0, 30.0, None),
               ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 600.0, 250.0,
                "allreduce")]
    for i, (name, ts, dur, collective) in enumerate(kernels):
        correlation = 100 + i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 10, "tid": 10, "ts": 10.0 + 20 * i, "dur": 5.0,
                       "args": {"correlation": correlation}})
        args: dict = {"correlation": correlation, "device": 0, "stream": 7}
        if collective:
            args.update({"Collective name": collective, "Group size": world,
                         "Process Group Name": "0", "Process Group Description": "default_pg",
                         "Process Group Ranks": list(range(world)),
                         "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                       "ts": ts, "dur": dur, "args": args})
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }


def cpu_ops_trace(rank: int, world: int) -> dict:
    """A Kineto trace of a CPU-only job without steps or Megatron frames: two CPU ops.

    No ProfilerStep either: a ProfilerStep alone would time the run on the
    CPU (its step, all outside step frames); this run has nothing to time.
    """
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10,
         "ts": 100.0, "dur": 300.0 + 10 * rank},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 10, "tid": 10,
         "ts": 500.0, "dur": 50.0},
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }


def build_report_warehouse(base: Path) -> ReportWarehouse:
    """Ingest the runs under ``base`` and build ``base/warehouse`` (one dbt build)."""
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import SimConfig, simulate_run

    root = base / "warehouse"
    built = ReportWarehouse(root=root)

    def load(path: Path, run: str) -> None:
        result = ingest_paths([path], warehouse=root, run=run, jobs=1, force=True,
                              progress=False)
        assert not result.failed, result.failed
        built.runs.append(run)

    small = dict(tp=2, pp=2, dp=1, microbatches=2, iterations=2, layers=4, hidden=512,
                 heads=4, seq_length=512, vocab=8_000)
    for run, config in (("sim_a", SimConfig(**small, stragglers=((1, 1.5),), seed=0)),
                        ("sim_b", SimConfig(**small, seed=1))):
        simulated = simulate_run(config, base / run, jobs=1)
        load(simulated.out_dir, run)

    hostile = base / "hostile"
    hostile.mkdir()
    for rank in range(2):
        path = hostile / f"rank_{rank:04d}_iter_1.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(hostile_trace(rank, 2)).encode()))
    load(hostile, "hostile")

    cpu_ops = base / "cpu_ops"
    cpu_ops.mkdir()
    for rank in range(2):
        path = cpu_ops / f"rank_{rank:04d}_iter_1.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(cpu_ops_trace(rank, 2)).encode()))
    load(cpu_ops, "cpu_ops")

    if DLRM.is_dir():
        load(DLRM, "dlrm_8rank")
    if MEGATRON_CPU.is_dir():
        load(MEGATRON_CPU, "tp1_pp4_dp2")
    if NSYS_H100.is_file():
        load(NSYS_H100, "nsys_h100")
    # The models' unit tests are the model tests' business; the data tests still run.
    build_warehouse(root, ["--quiet", "--exclude-resource-type", "unit_test"])
    return built
