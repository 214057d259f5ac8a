"""`tracehouse compare` and fct_iteration_summary on the session's report warehouse.

sim_a is sim_b's layout with rank 1 slowed 1.5x (tests/report_warehouse.py):
its steps must come out slower, iteration by iteration, and its summary must
name rank 1 as the straggler; sim_b's must not be slower than itself.
"""

from __future__ import annotations

import io
import json

import pytest

from conftest import query_warehouse
from report_warehouse import ReportWarehouse
from tracehouse.cli import main
from tracehouse.query.compare_runs import compare_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wh(report_wh: ReportWarehouse) -> ReportWarehouse:
    """The session's report warehouse (conftest), read-only."""
    return report_wh


def test_iteration_summary_names_the_straggler_and_its_slow_steps(wh: ReportWarehouse) -> None:
    rows = query_warehouse(wh.root, """
        select run_id, iteration, timing_source, ranks, step_ns, min_step_ns,
               straggler_rank, exposed_communication_share, bubble_ratio, slowest_rank
        from fct_iteration_summary where run_id in ('sim_a', 'sim_b') order by 1, 2""")
    by_run: dict[str, list[tuple]] = {}
    for row in rows:
        by_run.setdefault(row[0], []).append(row)
    assert [len(by_run[run]) for run in ("sim_a", "sim_b")] == [2, 2]
    for slow, fast in zip(by_run["sim_a"], by_run["sim_b"]):
        assert slow[2] == fast[2] == "gpu" and slow[3] == fast[3] == 4
        # The 1.5x rank sets the step: its compute is a small part of this
        # tiny run's step, so the step grows by tens of us, not by half.
        assert slow[4] > fast[4] and slow[9] == 1, (slow, fast)
        assert 0 < slow[5] <= slow[4]
        assert 0 <= slow[7] < 1 and 0 <= slow[8] < 1


def test_summary_names_what_the_distributed_marts_say(wh: ReportWarehouse) -> None:
    """Straggler and worst skew are the fct_stragglers / fct_collectives rows they name
    (which rank that is in a given run is those marts' tests' business)."""
    mismatched = query_warehouse(wh.root, """
        select s.run_id, s.iteration
        from fct_iteration_summary as s
        left join fct_stragglers as f
            on f.run_id = s.run_id and f.iteration = s.iteration and f.straggler_rank = 1
                and f.wait_caused_ns > 0
        left join (
            select run_id, iteration, max(start_skew_ns) as worst
            from fct_collectives group by 1, 2
        ) as c on c.run_id = s.run_id and c.iteration = s.iteration
        where s.straggler_rank is distinct from f.rank
            or s.worst_skew_ns is distinct from c.worst""")
    assert mismatched == []
    [(blameless,)] = query_warehouse(wh.root, "select count(*) from fct_iteration_summary "
                                     "where straggler_rank is not null "
                                     "and not straggler_wait_caused_ns > 0")
    assert blameless == 0, "a straggler that held nobody back"
    [(named,)] = query_warehouse(wh.root, "select count(*) from fct_iteration_summary "
                                 "where straggler_rank is not null and worst_skew_ns > 0")
    assert named >= 4  # both simulated runs' iterations at least


def test_cpu_only_runs_get_a_summary(wh: ReportWarehouse) -> None:
    run = wh.need("tp1_pp4_dp2")
    rows = query_warehouse(wh.root, "select timing_source, ranks, step_ns, "
                           "exposed_communication_share from fct_iteration_summary "
                           "where run_id = ?", [run])
    assert rows and all(row[0] == "cpu" and row[1] == 8 and row[2] > 0 for row in rows), rows
    assert all(row[3] is not None and 0 < row[3] < 1 for row in rows), rows


def test_compare_prints_both_runs_and_the_difference(wh: ReportWarehouse) -> None:
    out = io.StringIO()
    assert compare_runs("sim_b", "sim_a", wh.root, fmt="json", out=out) == 0
    rows = json.loads(out.getvalue())
    assert [row["#"] for row in rows] == ["1", "2", "run"]
    summary = dict(query_warehouse(wh.root, "select run_id, avg(step_ns) from "
                                   "fct_iteration_summary group by 1"))
    run_figures = dict(query_warehouse(wh.root, "select run_id, mean_step_ns from "
                                       "fct_run_summary"))
    assert run_figures["sim_a"] == pytest.approx(summary["sim_a"])
    mean = rows[-1]
    assert mean["step ms A"] == pytest.approx(summary["sim_b"] / 1e6, abs=1e-3)
    assert mean["step ms B"] == pytest.approx(summary["sim_a"] / 1e6, abs=1e-3)
    assert mean["step Δ %"] > 0 and mean["step Δ ms"] > 0
    assert all(row["slowest rank B"] == 1 for row in rows[:-1])


def test_compare_on_the_command_line(
    wh: ReportWarehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "sim_b", "sim_a", "--warehouse", str(wh.root)]) == 0
    text = capsys.readouterr().out
    assert "step ms A" in text and "run" in text
    assert main(["compare", "sim_b", "no'such", "--warehouse", str(wh.root)]) == 2
    err = capsys.readouterr().err
    assert "no iterations for run(s) \"no'such\"" in err


def test_compare_a_gpu_run_with_a_cpu_run(wh: ReportWarehouse) -> None:
    gpu, cpu = wh.need("dlrm_8rank"), wh.need("tp1_pp4_dp2")
    out = io.StringIO()
    assert compare_runs(gpu, cpu, wh.root, fmt="csv", out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("#,iter A,iter B,step ms A") and lines[-1].startswith("run,")
