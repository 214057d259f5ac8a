"""The one step and its parts (fct_rank_iterations) on every kind of real trace.

One warehouse per module, built with `tracehouse build` (so every data
test runs, step_parts_add_up among them): the A100 trace (three
ProfilerSteps, so steps follow each other on the GPU), dlrm_8rank (one step
per rank, kernels before it), two ranks of a 128-rank job, a CPU-only
Megatron run, both Nsight exports (no ProfilerStep) and a simulated run.
The parts are checked against the YAML's `step_part` columns and against
an independent sweep in Python over the same kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT, SHARED_DATA, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow

KINETO = SHARED_DATA / "kineto"
SETS = {
    "a100": [KINETO / "single_rank" / "a100_nccl_pg_args.json.gz"],
    "dlrm": [KINETO / "dlrm_8rank"],
    "sampled": sorted((KINETO / "single_rank").glob("sampled_128rank_job_rank-*.json.gz")),
    "cpu": [KINETO / "megatron_cpu" / "tp1_pp4_dp2"],
    "nsys_h100": [SHARED_DATA / "nsys" / "h100_2gpu_1s.sqlite"],
    "nsys_mfu": [SHARED_DATA / "nsys" / "mfu_2gpu_before.sqlite"],
}
PARTS = ("step_compute_ns", "step_overlap_ns", "step_exposed_communication_ns",
         "step_exposed_memory_ns", "step_optimizer_ns", "step_idle_ns")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [str(p) for paths in SETS.values() for p in paths if not p.exists()]
    if missing or not SETS["sampled"]:
        pytest.skip(f"shared traces not found: {missing or 'sampled_128rank_job_rank-*'}")
    from tracehouse.simulate import SimConfig, simulate_run

    base = tmp_path_factory.mktemp("steps")
    root = base / "warehouse"
    sim = simulate_run(SimConfig(tp=2, pp=2, dp=1, microbatches=2, iterations=2, layers=4,
                                 hidden=512, heads=4, seq_length=512, vocab=8_000,
                                 stragglers=((1, 1.4),)), base / "sim", jobs=1)
    for run, paths in {**SETS, "sim": [sim.out_dir]}.items():
        result = ingest_paths(paths, warehouse=root, run=run, jobs=1, progress=False)
        assert not result.failed, result.failed
    # Every data test runs (step_parts_add_up among them); a failing one fails the build.
    assert run_dbt(["build", "--quiet"], root) == EXIT_OK
    yield root


def test_step_parts_are_the_yaml_step_part_columns() -> None:
    """The parts every check sums are exactly the columns marked meta step_part."""
    spec = yaml.safe_load((REPO_ROOT / "models/marts/core/_core__models.yml").read_text())
    [model] = [m for m in spec["models"] if m["name"] == "fct_rank_iterations"]
    marked = tuple(c["name"] for c in model["columns"]
                   if (c.get("meta") or {}).get("step_part"))
    assert marked == PARTS
    assert any("step_parts_add_up" in test for test in model["data_tests"])


def test_parts_add_up_to_the_step_on_every_row_of_every_run(warehouse: Path) -> None:
    rows = query_warehouse(warehouse, f"""
        select run_id, timing_source, count(*),
               count(*) filter (where {' + '.join(PARTS)} <> step_ns),
               count(*) filter (where least({', '.join(PARTS)}) < 0)
        from fct_rank_iterations where step_ns is not null
        group by 1, 2 order by 1
    """)
    assert {run: source for run, source, *_ in rows} == {
        "a100": "gpu", "cpu": "cpu", "dlrm": "gpu", "nsys_h100": "gpu", "nsys_mfu": "gpu",
        "sampled": "gpu", "sim": "gpu"}
    for run, _source, count, wrong, negative in rows:
        assert count > 0 and (wrong, negative) == (0, 0), run


def test_gpu_steps_tile_each_trace(warehouse: Path) -> None:
    """Each step ends where the next begins; the last ends at the trace's last kernel."""
    rows = query_warehouse(warehouse, """
        with ordered as (
            select *, lead(step_start_ns) over (
                partition by trace_id order by step_start_ns) as next_start_ns
            from fct_rank_iterations where step_rule = 'gpu_projected_step'
        ),
        kernels as (
            select trace_id, min(ts_ns) as first_ns, max(end_ns) as last_ns
            from fct_kernels where iteration is not null group by 1
        )
        select
            ordered.run_id, count(*),
            count(*) filter (where next_start_ns is not null and step_end_ns <> next_start_ns),
            count(*) filter (where next_start_ns is null and step_end_ns <> kernels.last_ns),
            min(step_start_ns = kernels.first_ns or step_start_ns > kernels.first_ns)
        from ordered inner join kernels using (trace_id)
        group by 1 order by 1
    """)
    assert {run for run, *_ in rows} == {"a100", "dlrm", "sampled", "sim"}
    for run, _steps, gaps, ends, starts in rows:
        assert (gaps, ends, starts) == (0, 0, True), run
    assert dict((run, steps) for run, steps, *_ in rows)["a100"] == 3


def test_traces_without_steps_are_one_whole_trace_window(warehouse: Path) -> None:
    rows = query_warehouse(warehouse, """
        select steps.run_id, steps.step_rule, steps.step_start_ns = k.first_ns,
               steps.step_end_ns = k.last_ns
        from fct_rank_iterations as steps
        inner join (select run_id, rank, min(ts_ns) as first_ns, max(end_ns) as last_ns
                    from fct_kernels group by 1, 2) as k using (run_id, rank)
        where steps.step_rule = 'gpu_whole_trace'
    """)
    # An Nsight export without ProfilerStep or NVTX iteration ranges whose GPUs
    # disagree on nsys-ai's gap rule (MFU: 3 and 1) is one window per GPU, first to
    # last kernel (its kernels all sit in the trace's iteration); the H100 export's
    # GPUs agree (28 each), so the gap rule times its steps.
    assert sorted(run for run, *_ in rows) == ["nsys_mfu"] * 2
    assert all(start and end for _run, _rule, start, end in rows)


def test_parts_match_an_independent_sweep(warehouse: Path) -> None:
    """Recompute each GPU window's parts in Python from fct_kernels (every kernel of the trace)."""
    windows = query_warehouse(warehouse, f"""
        select run_id, rank, iteration, trace_id, step_start_ns, step_end_ns, {', '.join(PARTS)}
        from fct_rank_iterations where timing_source = 'gpu' and run_id in ('a100', 'dlrm', 'sim')
    """)
    kernels = query_warehouse(warehouse, """
        select trace_id, kind, ts_ns, end_ns from fct_kernels
        where run_id in ('a100', 'dlrm', 'sim') and end_ns > ts_ns
    """)
    by_trace: dict[str, list[tuple[str, int, int]]] = {}
    for trace, kind, start, end in kernels:
        by_trace.setdefault(trace, []).append((kind, start, end))
    assert len(windows) > 10
    for _run, _rank, _iteration, trace, start, end, *parts in windows:
        assert tuple(parts) == _sweep(by_trace[trace], start, end), (trace, start, end)


def _sweep(kernels: list[tuple[str, int, int]], start: int, end: int) -> tuple[int, ...]:
    """Nanoseconds of [start, end) per part by the GPU priority, from raw kernel intervals."""
    points = sorted({start, end} | {t for _k, s, e in kernels for t in (s, e) if start < t < end})
    totals = dict.fromkeys(("compute", "overlap", "communication", "memory", "idle"), 0)
    for left, right in zip(points, points[1:]):
        open_kinds = {kind for kind, s, e in kernels if s <= left and e >= right}
        if {"compute", "communication"} <= open_kinds:
            part = "overlap"
        elif "compute" in open_kinds:
            part = "compute"
        elif "communication" in open_kinds:
            part = "communication"
        elif "memory" in open_kinds:
            part = "memory"
        else:
            part = "idle"
        totals[part] += right - left
    return (totals["compute"], totals["overlap"], totals["communication"], totals["memory"], 0,
            totals["idle"])


def test_cpu_step_is_the_profiler_step(warehouse: Path) -> None:
    rows = query_warehouse(warehouse, """
        select steps.run_id, steps.timing_source,
               count(*) filter (where steps.cpu_step_start_ns = p.ts_ns
                                and steps.cpu_step_ns = p.window_end_ns - p.ts_ns),
               count(*)
        from fct_rank_iterations as steps
        inner join intermediate.int_step_windows_resolved as p
            on steps.trace_id = p.trace_id and steps.iteration = p.step_number
        group by 1, 2 order by 1
    """)
    assert {run: (source, same, n) for run, source, same, n in rows} == {
        "a100": ("gpu", 3, 3),
        "cpu": ("cpu", 8, 8),
        "dlrm": ("gpu", 8, 8),
        "sampled": ("gpu", 4, 4),
        "sim": ("gpu", 8, 8),
        "nsys_h100": ("gpu", 56, 56),  # nsys-ai's gap rule: 28 iterations on each GPU
    }
    [(cpu_rows, cpu_same)] = query_warehouse(warehouse, """
        select count(*), count(*) filter (
            where step_ns = cpu_step_ns and step_rule = 'profiler_step' and kernel_count = 0)
        from fct_rank_iterations where run_id = 'cpu'""")
    assert cpu_rows == cpu_same == 8


def test_gpu_lag_is_gpu_start_minus_cpu_start(warehouse: Path) -> None:
    [(bad, lagging, total, at_capture_start)] = query_warehouse(warehouse, """
        select count(*) filter (where gpu_lag_ns <> step_start_ns - cpu_step_start_ns),
               count(*) filter (where gpu_lag_ns > 0), count(*),
               count(*) filter (where gpu_lag_ns = 0 and step_rule = 'gpu_projected_gap_rule'
                                and iteration = 0)
        from fct_rank_iterations
        where timing_source = 'gpu' and cpu_step_start_ns is not null
    """)
    assert bad == 0
    # Every GPU step starts after its CPU step, but for the gap rule's first
    # window on the H100 export, whose capture opens with GPU work already
    # running (kernels without a launch call): both open at the capture's start.
    assert lagging + at_capture_start == total > 0
    assert at_capture_start == 2


def test_span_figures_stay_beside_the_step(warehouse: Path) -> None:
    """HTA's span figures are unchanged by the step: they still add up to the span."""
    [(rows, wrong)] = query_warehouse(warehouse, """
        select count(*), count(*) filter (where compute_ns + exposed_communication_ns +
                                          exposed_memory_ns + idle_ns <> span_ns)
        from fct_rank_iterations where span_ns is not null
    """)
    assert rows > 0 and wrong == 0
