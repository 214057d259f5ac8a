"""fct_idle_breakdown and fct_kernel_launches cross-checked with the installed HTA.

The shared GPU trace sets and a small simulated Megatron run (ns-resolution
timestamps) are runs of the session's reference warehouse (conftest: one
run per set, ingested and built once); Holistic Trace Analysis (the
``traceinsight`` package, import name ``hta``) loads the same files and
computes ``get_idle_time_breakdown`` and ``get_cuda_kernel_launch_stats`` for
every rank. HTA runs with its ns rounding switched off
(``HTA_DISABLE_NS_ROUNDING``), so both sides see the
trace's own times; its results are in microseconds.

The one deliberate difference (documented in int_stream_idle_categorized):
a kernel whose CPU launch is not in the trace (dlrm ranks 1 and 3: 64
optimizer kernels queued before profiling began) is never host_wait here,
while HTA compares it with row 0 of its frame. It moves < 1% of a stream's
idle time between categories, so every category is compared within 1% of
its stream's idle time, and every stream's total within 1%.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from conftest import SHARED_DATA, ReferenceWarehouse, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow

KINETO = SHARED_DATA / "kineto"
#: The shared GPU trace sets (runs of the reference warehouse).
SETS = ("dlrm_8rank", "a100_nccl_pg_args", "sampled_128rank_job_rank-0",
        "sampled_128rank_job_rank-1")
#: A small simulated Megatron run too (conftest.REFERENCE_SIMULATIONS).
SIMULATED = "simulated"
#: Acceptance tolerance (issue 11): 1%.
REL = 0.01


@pytest.fixture(scope="module")
def sets(reference_warehouse: ReferenceWarehouse) -> dict[str, Path]:
    """The shared GPU sets plus the simulated run's iteration folder, as ingested."""
    return {run: reference_warehouse.sources[run] for run in [*SETS, SIMULATED]}


@pytest.fixture
def warehouse(reference_warehouse: ReferenceWarehouse) -> Path:
    return reference_warehouse.root


@pytest.fixture(scope="module")
def hta_results(sets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """set -> {'idle': {rank: DataFrame}, 'launch': {rank: DataFrame}} from HTA."""
    pytest.importorskip("hta", reason="HTA (pip extra 'traceinsight') is not installed")
    from hta.configs.env_options import HTAEnvOptions
    from hta.trace_analysis import TraceAnalysis

    options = HTAEnvOptions.instance()
    was = options.disable_ns_rounding()
    options.set_disable_ns_rounding(True)
    logging.getLogger("hta").setLevel(logging.ERROR)
    out: dict[str, dict] = {}
    try:
        for name, path in sets.items():
            folder = path
            if path.is_file():  # HTA reads folders: one file per folder
                folder = tmp_path_factory.mktemp(f"hta_{name}")
                shutil.copy(path, folder / path.name)
            analysis = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
            ranks = analysis.t.get_ranks()
            out[name] = {
                "idle": {
                    rank: analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
                    for rank in ranks
                },
                "launch": analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
            }
    finally:
        options.set_disable_ns_rounding(was)
    return out


def _ours_idle(warehouse: Path, run: str, rank: int) -> dict[tuple[int, str], float]:
    rows = query_warehouse(
        warehouse,
        "select stream, idle_category, idle_ns / 1000.0 from fct_idle_breakdown "
        "where run_id = ? and rank = ?",
        [run, rank],
    )
    return {(int(stream), category): us for stream, category, us in rows}


def test_idle_breakdown_equals_hta(warehouse: Path, hta_results: dict[str, dict]) -> None:
    compared = 0
    for run, results in hta_results.items():
        for rank, frame in results["idle"].items():
            ours = _ours_idle(warehouse, run, rank)
            assert {stream for stream, _ in ours} == {int(s) for s in frame["stream"]}, (run, rank)
            totals = frame.groupby("stream")["idle_time"].sum()
            for stream, hta_total in totals.items():
                our_total = sum(v for (s, _), v in ours.items() if s == int(stream))
                assert our_total == pytest.approx(hta_total, rel=REL, abs=0.01), (run, rank, stream)
            for row in frame.itertuples():
                stream_total = totals[row.stream]
                ours_us = ours[(int(row.stream), row.idle_category)]
                assert abs(ours_us - row.idle_time) <= REL * stream_total + 0.01, (
                    run,
                    rank,
                    row.stream,
                    row.idle_category,
                    ours_us,
                    row.idle_time,
                )
                compared += 1
    assert compared > 50


def test_idle_breakdown_is_exact_where_every_kernel_has_its_launch(
    warehouse: Path, hta_results: dict[str, dict]
) -> None:
    """Away from the documented difference (dlrm ranks 1 and 3), every category is HTA's."""
    for run, results in hta_results.items():
        for rank, frame in results["idle"].items():
            if run == "dlrm_8rank" and rank in (1, 3):
                continue
            ours = _ours_idle(warehouse, run, rank)
            for row in frame.itertuples():
                assert ours[(int(row.stream), row.idle_category)] == pytest.approx(
                    row.idle_time, rel=REL, abs=0.01
                ), (run, rank, row.stream, row.idle_category)


def test_kernel_launches_equal_hta(warehouse: Path, hta_results: dict[str, dict]) -> None:
    for run, results in hta_results.items():
        for rank, frame in results["launch"].items():
            rows = query_warehouse(
                warehouse,
                "select correlation_id, cpu_duration_ns / 1e3, gpu_duration_ns / 1e3, "
                "launch_delay_ns / 1e3 from fct_kernel_launches where run_id = ? and rank = ?",
                [run, rank],
            )
            ours = {int(c): (cpu, gpu, delay) for c, cpu, gpu, delay in rows}
            theirs = {
                int(r.correlation): (r.cpu_duration, r.gpu_duration, r.launch_delay)
                for r in frame.itertuples()
            }
            assert len(rows) == len(frame) == len(theirs), (run, rank)
            assert set(ours) == set(theirs), (run, rank)
            for index, label in enumerate(["cpu_duration", "gpu_duration", "launch_delay"]):
                total_ours = sum(v[index] for v in ours.values())
                total_theirs = sum(v[index] for v in theirs.values())
                assert total_ours == pytest.approx(total_theirs, rel=REL), (run, rank, label)
            mismatched = [
                c
                for c in ours
                if any(abs(a - b) > 0.01 for a, b in zip(ours[c], theirs[c], strict=True))
            ]
            assert not mismatched, (run, rank, mismatched[:5])


def test_mis_bound_launch_flow_loses_to_correlation(warehouse: Path) -> None:
    """dlrm rank 3's memsets: the ac2g flow starts at cudaPeekAtLastError, the
    correlation id at cudaMemsetAsync; the launch is the memset call."""
    [(count, names)] = query_warehouse(
        warehouse,
        """
        select count(*), list(distinct launch_name)
        from fct_kernel_launches
        where run_id = 'dlrm_8rank' and rank = 3 and correlation_id in (44627, 44637)
        """,
    )
    assert count == 2
    assert names == ["cudaMemsetAsync"]


def test_launch_outliers_follow_the_cut_offs(warehouse: Path) -> None:
    [(bad,)] = query_warehouse(
        warehouse,
        """
        select count(*) from fct_kernel_launches
        where is_runtime_outlier <> (cpu_duration_ns > 50000)
           or is_launch_delay_outlier <> (launch_delay_ns > 100000)
           or is_short_kernel <> (gpu_duration_ns < cpu_duration_ns
                                  and cpu_duration_ns <= 50000)
        """,
    )
    assert bad == 0
    [(delayed,)] = query_warehouse(
        warehouse, "select count(*) from fct_kernel_launches where is_launch_delay_outlier"
    )
    assert delayed > 0


def test_cpu_only_runs_build_empty_idle_marts(tmp_path: Path) -> None:
    """A run without GPU work (megatron_cpu) builds the marts, with no rows for it."""
    path = KINETO / "megatron_cpu" / "tp1_pp4_dp2"
    if not path.exists():
        pytest.skip(f"shared traces not found: {path}")
    root = tmp_path / "warehouse"
    result = ingest_paths([path], warehouse=root, run="cpu", progress=False)
    assert not result.failed
    args = ["run", "--select", "+fct_idle_breakdown", "+fct_kernel_launches"]
    assert run_dbt(args, root) == EXIT_OK
    [(idle, launches)] = query_warehouse(
        root,
        "select (select count(*) from fct_idle_breakdown), "
        "(select count(*) from fct_kernel_launches)",
    )
    assert (idle, launches) == (0, 0)


def test_report_draws_idle_by_cause(warehouse: Path, tmp_path: Path) -> None:
    import duckdb

    from tracehouse.core.warehouse import Warehouse
    from tracehouse.reports.base import ChartContext
    from tracehouse.reports.idle import FAMILY

    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        [chart] = FAMILY.render(ChartContext(con=con, run_id="dlrm_8rank", out_dir=tmp_path))
    finally:
        con.close()
    assert chart.png.stat().st_size > 0
    assert "host wait" in chart.caption and "median launch delay" in chart.caption
