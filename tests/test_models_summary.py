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

import pytest

from report_warehouse import ReportWarehouse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wh(report_wh: ReportWarehouse) -> ReportWarehouse:
    """The session's report warehouse (conftest), read-only."""
    return report_wh


def test_every_run_has_one_summary_with_its_timing_source(wh: ReportWarehouse) -> None:
    sources = dict(wh.rows("select run_id, timing_source from fct_run_summary"))
    expected = {"sim_a": "gpu", "sim_b": "gpu", "hostile": "gpu", "cpu_ops": "none",
                "dlrm_8rank": "gpu", "tp1_pp4_dp2": "cpu", "nsys_h100": "gpu"}
    assert {run: sources.get(run) for run in wh.runs} == {run: expected[run] for run in wh.runs}
    # The source follows the data: kernels -> gpu, else CPU step frames -> cpu.
    independent = dict(wh.rows("""
        select run_id, case
            when run_id in (select run_id from fct_kernels) then 'gpu'
            when run_id in (select run_id from fct_cpu_steps) then 'cpu'
            when run_id in (select traces.run_id from intermediate.int_traces_loaded as traces
                            join intermediate.int_step_windows_resolved as p
                            using (trace_id)) then 'cpu'
            else 'none' end
        from dim_ranks group by run_id
    """))
    assert {run: sources[run] for run in independent} == independent


PARTS = ("compute", "overlap", "exposed_communication", "exposed_memory", "optimizer", "idle")
SHARES = ", ".join(f"{part}_share" for part in PARTS)


def test_summaries_read_the_one_step(wh: ReportWarehouse) -> None:
    """Iteration step = the slowest rank's step_ns of fct_rank_iterations; run mean = their mean."""
    for run in wh.runs:
        got = wh.rows("""
            select iteration, step_ns, slowest_rank, rank_step_total_ns
            from fct_iteration_summary where run_id = ? order by iteration""", [run])
        want = wh.rows("""
            select iteration, max(step_ns), arg_max(rank, step_ns * 1e6 - rank), sum(step_ns)
            from fct_rank_iterations where run_id = ? and step_ns is not null
            group by iteration order by iteration""", [run])
        assert got == want, run
        [(mean_step,)] = wh.rows("select mean_step_ns from fct_run_summary where run_id = ?",
                                 [run])
        steps = [row[1] for row in want]
        assert mean_step == (pytest.approx(sum(steps) / len(steps)) if steps else None), run


def test_shares_add_up_to_one_at_every_grain(wh: ReportWarehouse) -> None:
    for mart in ("fct_run_summary", "fct_iteration_summary", "fct_rank_summary",
                 "fct_stage_summary"):
        rows = wh.rows(f"select {' + '.join(f'{p}_share' for p in PARTS)} from {mart} "
                       "where compute_share is not null")
        assert rows, mart
        assert all(total == pytest.approx(1.0, abs=1e-12) for (total,) in rows), mart


def test_run_shares_equal_those_recomputed_from_iterations(wh: ReportWarehouse) -> None:
    """A run's share = the iterations' shares weighted by their summed steps (ratios of sums)."""
    got = wh.rows(f"select run_id, rank_step_total_ns, {SHARES} from fct_run_summary "
                  "where timing_source <> 'none' order by run_id")
    want = wh.rows(f"""
        select run_id, sum(rank_step_total_ns),
               {", ".join(f"sum({p}_share * rank_step_total_ns) / sum(rank_step_total_ns)"
                          for p in PARTS)}
        from fct_iteration_summary group by run_id order by run_id""")
    assert len(got) == len(want) >= 4
    for row, expected in zip(got, want):
        assert row[:2] == expected[:2]
        assert row[2:] == pytest.approx(expected[2:], abs=1e-12), row[0]


def test_iteration_shares_equal_those_recomputed_from_ranks(wh: ReportWarehouse) -> None:
    got = wh.rows(f"select run_id, iteration, {SHARES} from fct_iteration_summary "
                  "order by run_id, iteration")
    want = wh.rows(f"""
        select run_id, iteration,
               {", ".join(f"sum(step_{p}_ns) / sum(step_ns)" for p in PARTS)}
        from fct_rank_iterations where step_ns is not null
        group by run_id, iteration order by run_id, iteration""")
    assert len(got) == len(want) > 4
    for row, expected in zip(got, want):
        assert row[:2] == expected[:2]
        assert row[2:] == pytest.approx(expected[2:], abs=1e-12), row[:2]


def test_rank_and_stage_shares_are_ratios_of_sums(wh: ReportWarehouse) -> None:
    got = wh.rows(f"select run_id, rank, {SHARES} from fct_rank_summary order by 1, 2")
    want = wh.rows(f"""
        select run_id, rank, {", ".join(f"sum(step_{p}_ns) / sum(step_ns)" for p in PARTS)}
        from fct_rank_iterations where step_ns is not null group by 1, 2 order by 1, 2""")
    assert [row[:2] for row in got] == [row[:2] for row in want]
    assert all(row[2:] == pytest.approx(exp[2:]) for row, exp in zip(got, want))
    got = wh.rows(f"select run_id, pp_stage, {SHARES} from fct_stage_summary order by 1, 2")
    want = wh.rows(f"""
        select run_id, pp_stage, {", ".join(f"sum(step_{p}_ns) / sum(step_ns)" for p in PARTS)}
        from fct_rank_iterations where step_ns is not null and pp_stage is not null
        group by 1, 2 order by 1, 2""")
    assert [row[:2] for row in got] == [row[:2] for row in want] and got
    assert all(row[2:] == pytest.approx(exp[2:]) for row, exp in zip(got, want))


def test_cpu_only_run_is_timed_by_its_profiler_steps(wh: ReportWarehouse) -> None:
    run = wh.need("tp1_pp4_dp2")
    [(source, rule, compute, frames, optimizer, overlap, memory)] = wh.rows("""
        select timing_source, step_rule, compute_share, exposed_communication_share,
               optimizer_share, overlap_share, exposed_memory_share
        from fct_run_summary where run_id = ?""", [run])
    assert (source, rule) == ("cpu", "profiler_step")
    assert compute > 0 and frames > 0 and optimizer > 0
    assert overlap == memory == 0
    stages = wh.rows("select pp_stage, ranks from fct_stage_summary where run_id = ? "
                     "order by pp_stage", [run])
    assert stages == [(0, 2), (1, 2), (2, 2), (3, 2)]


def test_most_compute_against_its_stage(wh: ReportWarehouse) -> None:
    """sim_a's rank 1 computes 1.5x: most compute against its stage (peer_group pp_stage)."""
    rows = wh.rows("""
        select rank, peer_group, stage_ranks, compute_vs_peers, compute_ns / stage_median_compute_ns
        from fct_rank_summary where run_id = 'sim_a' order by compute_vs_peers desc, rank""")
    assert [r[0] for r in rows][:1] == [1]
    assert {r[1] for r in rows} == {"pp_stage"} and {r[2] for r in rows} == {2}
    assert all(r[3] == pytest.approx(r[4]) for r in rows)
    assert rows[0][3] > 1.1


def test_the_straggler_is_fct_stragglers_rank_one(wh: ReportWarehouse) -> None:
    """One straggler per question: the run's is the rank that caused the most waiting."""
    got = dict(wh.rows("select run_id, straggler_rank from fct_run_summary"))
    want = dict(wh.rows("""
        select run_id, arg_max(rank, wait_caused_ns) from (
            select run_id, rank, sum(wait_caused_ns) as wait_caused_ns
            from fct_stragglers group by 1, 2) where wait_caused_ns > 0 group by 1"""))
    assert {run: got[run] for run in wh.runs} == {run: want.get(run) for run in wh.runs}
    assert got["dlrm_8rank" if "dlrm_8rank" in wh.runs else "sim_a"] is not None
    iterations = wh.rows("""
        select summary.run_id, summary.iteration, summary.straggler_rank, s.rank
        from fct_iteration_summary as summary
        left join fct_stragglers as s on s.run_id = summary.run_id
            and s.iteration is not distinct from summary.iteration and s.straggler_rank = 1""")
    assert all(row[2] == row[3] for row in iterations)


def test_ranks_without_stages_are_compared_with_the_run(wh: ReportWarehouse) -> None:
    run = wh.need("dlrm_8rank")
    rows = wh.rows("""
        select peer_group, stage_ranks, compute_vs_peers, compute_ns / median_compute_ns
        from fct_rank_summary where run_id = ?""", [run])
    assert len(rows) == 8
    assert {(r[0], r[1]) for r in rows} == {("run", None)}
    assert all(r[2] == pytest.approx(r[3]) for r in rows)
    assert wh.rows("select count(*) from fct_stage_summary where run_id = ?", [run]) == [(0,)]


def test_run_kernel_summary_covers_every_kernel(wh: ReportWarehouse) -> None:
    got = wh.rows("""
        select run_id, sum(calls), sum(total_ns), round(sum(share_ratio), 9)
        from fct_run_kernel_summary group by run_id order by run_id""")
    want = wh.rows("""
        select run_id, count(*), sum(dur_ns), 1.0 from fct_kernels
        group by run_id order by run_id""")
    assert got == [(run, calls, total, pytest.approx(share)) for run, calls, total, share in want]

