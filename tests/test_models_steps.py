"""fct_rank_steps on real traces: GPU steps tile the kernel timeline, CPU-only runs get rows.

One warehouse per module: the A100 trace (three ProfilerSteps, so steps
follow each other on the GPU), dlrm_8rank (one step per rank, kernels
before it) and a CPU-only Megatron run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SHARED_DATA, query_warehouse
from tracehouse.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow

KINETO = SHARED_DATA / "kineto"
SETS = {
    "a100": KINETO / "single_rank" / "a100_nccl_pg_args.json.gz",
    "dlrm": KINETO / "dlrm_8rank",
    "cpu": KINETO / "megatron_cpu" / "tp1_pp4_dp2",
}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [str(p) for p in SETS.values() if not p.exists()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    root = tmp_path_factory.mktemp("steps") / "warehouse"
    for run, path in SETS.items():
        result = ingest_paths([path], warehouse=root, run=run, progress=False)
        assert not result.failed, result.failed
    assert run_dbt(["run", "--select", "+fct_rank_steps", "+fct_kernels"], root) == EXIT_OK
    assert run_dbt(["test", "--select", "fct_rank_steps"], root) == EXIT_OK
    yield root


def test_gpu_steps_tile_each_trace(warehouse: Path) -> None:
    """Each step ends where the next begins; together they fit in the trace's kernel span."""
    rows = query_warehouse(
        warehouse,
        """
        with ordered as (
            select *, lead(gpu_step_start_ns) over (
                partition by trace_id order by iteration) as next_start_ns
            from fct_rank_steps where gpu_step_ns is not null
        ),
        kernels as (
            select trace_id, max(end_ns) - min(ts_ns) as kernel_span_ns
            from fct_kernels group by 1
        )
        select
            ordered.run_id, ordered.rank, count(*),
            sum(gpu_step_ns), any_value(kernels.kernel_span_ns),
            count(*) filter (where next_start_ns is not null and gpu_step_end_ns <> next_start_ns),
            count(*) filter (where gpu_step_ns < 0)
        from ordered inner join kernels using (trace_id)
        group by 1, 2
        """,
    )
    assert {run for run, *_ in rows} == {"a100", "dlrm"}
    for run, rank, _steps, total, span, gaps, negative in rows:
        assert total <= span, (run, rank, total, span)
        assert (gaps, negative) == (0, 0), (run, rank)
    [(a100_steps, a100_total, a100_span)] = [
        (steps, total, span) for run, _r, steps, total, span, *_ in rows if run == "a100"
    ]
    assert a100_steps == 3
    # Kernels of all three steps: the steps tile first kernel to last end exactly.
    assert a100_total == a100_span


def test_gpu_steps_never_overlap_unlike_spans(warehouse: Path) -> None:
    """A step starts no earlier than the previous step's start plus its length."""
    [(overlapping,)] = query_warehouse(
        warehouse,
        """
        select count(*) from fct_rank_steps as a inner join fct_rank_steps as b
            on a.trace_id = b.trace_id and a.iteration < b.iteration
        where a.gpu_step_end_ns > b.gpu_step_start_ns
        """,
    )
    assert overlapping == 0


def test_cpu_step_is_the_profiler_step(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select steps.run_id, count(*) filter (where steps.cpu_step_ns = p.end_ns - p.ts_ns),
               count(*)
        from fct_rank_steps as steps
        inner join intermediate.int_profiler_steps as p
            on steps.trace_id = p.trace_id and steps.iteration = p.step_number
        group by 1
        """,
    )
    assert {run: (same, n) for run, same, n in rows} == {
        "a100": (3, 3),
        "dlrm": (8, 8),
        "cpu": (8, 8),
    }


def test_cpu_only_runs_get_steps(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select rank, iteration, step_source, step_ns, cpu_step_ns, gpu_step_ns, kernel_count
        from fct_rank_steps where run_id = 'cpu' order by rank
        """,
    )
    assert [r[0] for r in rows] == list(range(8))
    for _rank, iteration, source, step, cpu, gpu, kernels in rows:
        assert iteration == 3
        assert source == "profiler_step"
        assert step == cpu > 0
        assert gpu is None and kernels == 0


def test_gpu_lag_is_gpu_start_minus_cpu_start(warehouse: Path) -> None:
    [(bad, lagging)] = query_warehouse(
        warehouse,
        """
        select count(*) filter (where gpu_lag_ns <> gpu_step_start_ns - cpu_step_start_ns),
               count(*) filter (where gpu_lag_ns > 0)
        from fct_rank_steps where gpu_step_ns is not null
        """,
    )
    assert bad == 0
    assert lagging == 11  # every GPU step starts after its CPU step
