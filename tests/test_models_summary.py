"""The summary marts (models/marts/summary) on real traces: what the report page reads.

Checked on the session's report warehouse (real ingest and dbt build of a
simulated GPU run, the shared DLRM and CPU-only Megatron traces, a run of
hostile kernel names and a run with neither kernels nor step frames), each
number against an independent query over the marts it is derived from. The
models' own rules (the step scope, the peer rule) have dbt unit tests
beside them (models/marts/summary/_summary__models.yml), run by
tests/test_models_core.py with every other unit test.
"""

from __future__ import annotations

import duckdb
import pytest

from report_warehouse import ReportWarehouse, report_warehouse
from tracehouse.warehouse import Warehouse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wh(tmp_path_factory: pytest.TempPathFactory) -> ReportWarehouse:
    return report_warehouse(tmp_path_factory)


def _rows(wh: ReportWarehouse, sql: str, params: list[object] | None = None) -> list[tuple]:
    con = duckdb.connect(str(Warehouse(wh.root).database), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_every_run_has_one_summary_with_its_timing_source(wh: ReportWarehouse) -> None:
    sources = dict(_rows(wh, "select run_id, timing_source from fct_run_summary"))
    expected = {"sim_a": "gpu", "sim_b": "gpu", "hostile": "gpu", "cpu_ops": "none",
                "dlrm_8rank": "gpu", "tp1_pp4_dp2": "cpu"}
    assert {run: sources.get(run) for run in wh.runs} == {run: expected[run] for run in wh.runs}
    # The source follows the data: kernels -> gpu, else CPU step frames -> cpu.
    independent = dict(_rows(wh, """
        select run_id, case
            when run_id in (select run_id from fct_rank_iterations) then 'gpu'
            when run_id in (select run_id from fct_microbatch_phases
                            where timing_source = 'cpu') then 'cpu'
            else 'none' end
        from dim_ranks group by run_id
    """))
    assert {run: sources[run] for run in independent} == independent


def test_gpu_scope_is_traced_iterations_with_the_gpu_step(wh: ReportWarehouse) -> None:
    """step_ns = fct_rank_steps.gpu_step_ns over the traced iterations; nothing outside steps."""
    for run in ("sim_a", *(r for r in ("dlrm_8rank",) if r in wh.runs)):
        got = _rows(wh, """
            select rank, iteration, step_ns, compute_ns from fct_step_breakdown
            where run_id = ? order by rank, iteration""", [run])
        want = _rows(wh, """
            select i.rank, i.iteration, s.gpu_step_ns, i.compute_ns
            from fct_rank_iterations as i
            join fct_rank_steps as s using (run_id, rank, iteration)
            where i.run_id = ? and i.iteration is not null order by i.rank, i.iteration""", [run])
        assert got and got == want, run


def test_headline_shares_are_ratios_of_sums(wh: ReportWarehouse) -> None:
    [(mean_step, compute, exposed, idle, overlap, iterations)] = _rows(wh, """
        select mean_step_ns, compute_share, exposed_communication_share, idle_share,
               overlap_ratio, iterations
        from fct_run_summary where run_id = 'sim_a'""")
    [want] = _rows(wh, """
        select avg(s.gpu_step_ns), sum(compute_ns) / sum(span_ns),
               sum(exposed_communication_ns) / sum(span_ns), sum(idle_ns) / sum(span_ns),
               sum(overlap_ns) / sum(communication_ns), count(distinct i.iteration)
        from fct_rank_iterations as i join fct_rank_steps as s using (run_id, rank, iteration)
        where i.run_id = 'sim_a' and i.iteration is not null""")
    assert (mean_step, compute, exposed, idle, overlap, iterations) == pytest.approx(want)


def test_cpu_only_run_is_summarised_from_step_frames(wh: ReportWarehouse) -> None:
    run = wh.need("tp1_pp4_dp2")
    [(mean_step, compute, frames, optimizer)] = _rows(wh, """
        select mean_step_ns, compute_share, comm_frames_share, optimizer_share
        from fct_run_summary where run_id = ?""", [run])
    [want] = _rows(wh, """
        with steps as (
            select rank, iteration, max(last_end_ns) - min(first_start_ns) as step_ns,
                   sum(busy_ns) filter (where phase in ('forward', 'backward', 'recompute'))
                       as compute_ns,
                   sum(busy_ns) filter (where phase in ('pp_p2p', 'dp_sync')) as frames_ns,
                   sum(busy_ns) filter (where phase = 'optimizer') as optimizer_ns
            from fct_microbatch_phases where run_id = ? and timing_source = 'cpu'
            group by rank, iteration)
        select avg(step_ns), sum(compute_ns) / sum(step_ns), sum(frames_ns) / sum(step_ns),
               sum(optimizer_ns) / sum(step_ns)
        from steps""", [run])
    assert (mean_step, compute, frames, optimizer) == pytest.approx(want)
    stages = _rows(wh, "select pp_stage, ranks from fct_stage_summary where run_id = ? "
                   "order by pp_stage", [run])
    assert stages == [(0, 2), (1, 2), (2, 2), (3, 2)]


def test_the_straggler_is_the_slowest_against_its_stage(wh: ReportWarehouse) -> None:
    """sim_a's rank 1 computes 1.5x: slowest against its stage (peer_group pp_stage)."""
    rows = _rows(wh, """
        select rank, peer_group, stage_ranks, slowness, compute_ns / stage_median_compute_ns
        from fct_rank_summary where run_id = 'sim_a' order by slowness desc, rank""")
    assert [r[0] for r in rows][:1] == [1]
    assert {r[1] for r in rows} == {"pp_stage"} and {r[2] for r in rows} == {2}
    assert all(r[3] == pytest.approx(r[4]) for r in rows)
    assert rows[0][3] > 1.1


def test_ranks_without_stages_are_compared_with_the_run(wh: ReportWarehouse) -> None:
    run = wh.need("dlrm_8rank")
    rows = _rows(wh, """
        select peer_group, stage_ranks, slowness, compute_ns / median_compute_ns
        from fct_rank_summary where run_id = ?""", [run])
    assert len(rows) == 8
    assert {(r[0], r[1]) for r in rows} == {("run", None)}
    assert all(r[2] == pytest.approx(r[3]) for r in rows)
    assert _rows(wh, "select count(*) from fct_stage_summary where run_id = ?", [run]) == [(0,)]


def test_run_kernel_summary_covers_every_kernel(wh: ReportWarehouse) -> None:
    got = _rows(wh, """
        select run_id, sum(calls), sum(total_ns), round(sum(share_ratio), 9)
        from fct_run_kernel_summary group by run_id order by run_id""")
    want = _rows(wh, """
        select run_id, count(*), sum(dur_ns), 1.0 from fct_kernels
        group by run_id order by run_id""")
    assert got == [(run, calls, total, pytest.approx(share)) for run, calls, total, share in want]

