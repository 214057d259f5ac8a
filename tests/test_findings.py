"""fct_findings on real runs, ``tracehouse findings`` and the report's first section.

On the session's reference warehouse (dlrm_8rank, the megatron_cpu runs, the
single-rank GPU traces, the H200 captures and the simulated runs, through the
real ingest and dbt build) every evaluated finding's evidence figures equal
the marts it cites, recomputed here from those marts' rows; every rule has a
row per iteration (fired, passed, or not evaluated with a reason). The
command prints fct_findings' rows, and the report's "What to change" section
shows the same figures (on the report tests' warehouse).
"""

from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path

import pytest

from conftest import ReferenceWarehouse, query_warehouse
from report_warehouse import ReportWarehouse
from tracehouse.cli import main

pytestmark = pytest.mark.slow  # ingests and builds (README: the fast set is -m "not slow")

#: Per rule: SQL recomputing (figure, baseline) of one finding from the mart it
#: cites, with the finding's keys bound ($run, $iteration, $rank, $pp_group).
EVIDENCE_SQL = {
    "straggler": """
        select compute_vs_stage_median, cast(stage_median_compute_ns as double)
        from fct_stragglers where run_id = $run and iteration = $iteration and rank = $rank""",
    "stage_imbalance": """
        select max(busy_ns) / avg(busy_ns), cast(max(group_span_ns) as double)
        from fct_pipeline_bubbles
        where run_id = $run and iteration = $iteration and pp_group_index = $pp_group""",
    "bubble_above_theory": """
        with stages as (
            select bubbles.pp_stage, bubbles.busy_ns, bubbles.bubble_ns, bubbles.group_span_ns,
                bubbles.theoretical_bubble_ratio,
                (select coalesce(sum(parts.idle_ns + parts.collective_wait_ns), 0)
                 from fct_pipeline_bubble_parts as parts
                 where parts.run_id = bubbles.run_id and parts.iteration = bubbles.iteration
                     and parts.pp_group_index = bubbles.pp_group_index
                     and parts.pp_stage = bubbles.pp_stage) as idle_ns
            from fct_pipeline_bubbles as bubbles
            where run_id = $run and iteration = $iteration and pp_group_index = $pp_group
        )
        select arg_max((bubble_ns - idle_ns) / group_span_ns, [busy_ns, -pp_stage])
            - coalesce(max(theoretical_bubble_ratio), 0),
            cast(max(group_span_ns) as double)
        from stages""",
    "few_microbatches": """
        select max(theoretical_bubble_ratio), cast(max(group_span_ns) as double)
        from fct_pipeline_bubbles
        where run_id = $run and iteration = $iteration and pp_group_index = $pp_group""",
    "host_bound_launches": """
        select
            (select max(step_idle_ns / step_ns) from fct_rank_iterations
             where run_id = $run and iteration = $iteration and step_ns > 0
                 and rank = $rank),
            (select sum(idle_ns) filter (where idle_category = 'host_wait') / sum(idle_ns)
             from fct_idle_breakdown where run_id = $run)
        where (select max(step_idle_ns / step_ns) from fct_rank_iterations
               where run_id = $run and iteration = $iteration and step_ns > 0)
            = (select step_idle_ns / step_ns from fct_rank_iterations
               where run_id = $run and iteration = $iteration and rank = $rank)""",
    "recompute": """
        select
            (select coalesce(sum(dur_ns), 0) from fct_kernels
             where run_id = $run and iteration = $iteration and phase = 'recompute')
            / (select sum(step_ns) from fct_rank_iterations
               where run_id = $run and iteration = $iteration and step_ns > 0),
            (select cast(coalesce(sum(dur_ns), 0) as double) from fct_kernels
             where run_id = $run and iteration = $iteration and phase = 'recompute')""",
    "low_gemm_mfu": """
        select sum(flops / (peak_tflops * 1e3)) / sum(dur_ns), cast(sum(dur_ns) as double)
        from fct_kernels
        where run_id = $run and iteration = $iteration and flops > 0 and peak_tflops > 0
            and flop_model in ('mm', 'addmm', 'bmm', 'baddbmm')""",
    "clock_skew": """
        select cast(max(offset_ns) - min(offset_ns) as double),
            (select cast(step_ns as double) from fct_iteration_summary
             where run_id = $run and iteration = $iteration)
        from dim_rank_clock_offsets where run_id = $run""",
}
#: The exposed-communication rules read the rank that sets the step (the longest
#: step of the iteration): (its step, the iteration's longest, its communication
#: kernels' summed time in the rule's group kinds); the figure is the exposed ns
#: over its step, and the exposed ns cannot exceed those kernels' time.
EXPOSED_SQL = """
    select
        (select step_ns from fct_rank_iterations
         where run_id = $run and iteration = $iteration and rank = $rank),
        (select max(step_ns) from fct_rank_iterations
         where run_id = $run and iteration = $iteration and step_ns > 0),
        (select coalesce(sum(dur_ns), 0) from fct_kernels
         where run_id = $run and iteration = $iteration and rank = $rank
             and kind = 'communication'
             and comm_group_kind in (select unnest(string_split($kinds, ','))))
"""


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@pytest.fixture(scope="module")
def reference(reference_warehouse: ReferenceWarehouse) -> ReferenceWarehouse:
    return reference_warehouse


def _findings(root: Path, where: str = "true") -> list[dict]:
    rows = query_warehouse(root, f"select * from fct_findings where {where} order by all")
    columns = [row[0] for row in query_warehouse(
        root, "select column_name from information_schema.columns "
              "where table_name = 'fct_findings' order by ordinal_position")]
    return [dict(zip(columns, row, strict=True)) for row in rows]


def test_every_rule_has_a_row_per_iteration(reference: ReferenceWarehouse) -> None:
    rules = {row[0] for row in query_warehouse(reference.root,
                                               "select rule_id from seeds.finding_rules")}
    iterations = query_warehouse(reference.root, """
        select run_id, iteration from fct_iteration_summary
        where iteration is not null and step_ns > 0""")
    rows = _findings(reference.root)
    assert len(rows) == len(rules) * len(iterations)
    for row in rows:
        if row["status"] == "not_evaluated":
            assert row["reason"], row
    # The CPU-only run cannot price GPU rules, and says so.
    cpu = [row for row in rows if row["run_id"] == "tp1_pp4_dp2" and row["rule_id"] == "recompute"]
    assert cpu and all(row["status"] == "not_evaluated" and "CPU-only" in row["reason"]
                       for row in cpu)


def test_cpu_only_straggler_is_the_one_fct_stragglers_names(
        reference: ReferenceWarehouse) -> None:
    """On the shared megatron_cpu runs (timing from CPU frames) the straggler rule is
    evaluated from fct_stragglers' CPU timings and names the rank the report's worst
    offenders name (fct_stragglers' straggler_rank 1), iteration by iteration."""
    rows = query_warehouse(reference.root, """
        select findings.run_id, findings.iteration, findings.status,
            findings.evidence_rank, stragglers.rank
        from fct_findings as findings
        inner join fct_iteration_summary as summary
            on findings.run_id = summary.run_id and findings.iteration = summary.iteration
        left join fct_stragglers as stragglers
            on findings.run_id = stragglers.run_id
            and findings.iteration = stragglers.iteration and stragglers.straggler_rank = 1
        where findings.rule_id = 'straggler' and summary.timing_source = 'cpu'
        order by all""")
    named = [row for row in rows if row[4] is not None]
    assert named, "no CPU-only iteration has a straggler: nothing to compare"
    for run_id, iteration, status, evidence_rank, straggler in rows:
        if straggler is None:
            assert status == "not_evaluated", (run_id, iteration)
        else:
            assert status != "not_evaluated" and evidence_rank == straggler, (
                run_id, iteration, status, evidence_rank, straggler)


def test_evidence_equals_the_marts_cited(reference: ReferenceWarehouse) -> None:
    rows = [row for row in _findings(reference.root) if row["status"] != "not_evaluated"]
    assert {row["rule_id"] for row in rows} >= {"straggler", "stage_imbalance",
                                                "few_microbatches", "clock_skew"}
    kinds = dict(query_warehouse(reference.root,
                                 "select rule_id, comm_group_kinds from seeds.finding_rules"))
    checked = 0
    for row in rows:
        params = {"run": row["run_id"], "iteration": row["iteration"]}
        step = query_warehouse(reference.root, "select step_ns from fct_iteration_summary "
                               "where run_id = $run and iteration = $iteration", params)
        assert row["step_ns"] == step[0][0]
        if row["priced_by"] == "direct":
            assert _close(row["share_of_step"], row["time_at_stake_ns"] / row["step_ns"])
        if row["rule_id"] in EVIDENCE_SQL:
            sql = EVIDENCE_SQL[row["rule_id"]]
            if "$rank" in sql:
                params["rank"] = row["evidence_rank"]
            if "$pp_group" in sql:
                params["pp_group"] = row["evidence_pp_group_index"]
            [(figure, baseline)] = query_warehouse(reference.root, sql, params)
            assert _close(row["figure"], figure), (row, figure)
            assert _close(row["baseline"], baseline), (row, baseline)
        else:
            params.update(kinds=kinds[row["rule_id"]], rank=row["evidence_rank"])
            [(rank_step, longest, comm_ns)] = query_warehouse(reference.root, EXPOSED_SQL,
                                                              params)
            assert rank_step == longest, row
            assert _close(row["figure"], row["baseline"] / rank_step)
            assert 0 <= row["baseline"] <= comm_ns
        checked += 1
    assert checked == len(rows)


#: The rules the replay prices (seed finding_rules.whatif_scenario) and their scenarios.
PRICED_BY_REPLAY = {"straggler": "no_straggler", "stage_imbalance": "balanced_stages",
                    "exposed_dp_comm": "perfect_dp_overlap",
                    "host_bound_launches": "no_host_gaps"}


def test_time_at_stake_is_the_replays_saving_where_it_prices(
        reference: ReferenceWarehouse) -> None:
    """The what-if models are built by default, so each evaluated finding of a rule
    with a scenario is priced by fct_what_if's saved_ns of that scenario (floored at 0)
    wherever fct_what_if has the iteration, and directly, saying why, where it has
    not; every other rule is priced directly."""
    scenarios = dict(query_warehouse(reference.root, """
        select rule_id, whatif_scenario from seeds.finding_rules
        where whatif_scenario is not null"""))
    assert scenarios == PRICED_BY_REPLAY
    rows = [row for row in _findings(reference.root) if row["status"] != "not_evaluated"]
    by_replay = 0
    for row in rows:
        saved = query_warehouse(reference.root, """
            select saved_ns from fct_what_if
            where run_id = $run and iteration = $iteration and scenario = $scenario""",
                                {"run": row["run_id"], "iteration": row["iteration"],
                                 "scenario": scenarios.get(row["rule_id"], "")})
        if saved:
            by_replay += 1
            assert row["priced_by"] == "what_if", row
            assert row["time_at_stake_ns"] == max(saved[0][0], 0), (row, saved)
            assert _close(row["share_of_step"], row["time_at_stake_ns"] / row["step_ns"])
        else:
            assert row["priced_by"] == "direct", row
            if row["rule_id"] in scenarios:
                assert row["reason"] == (f"priced directly: fct_what_if has no "
                                         f"{scenarios[row['rule_id']]} row for this iteration")
    # The replay prices rules on the GPU runs (the simulated pipelines, dlrm_8rank).
    assert by_replay > 0


def test_fired_on_each_real_run(reference: ReferenceWarehouse,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """What fired on each shared real run (printed for the note). tp1_pp4_dp2's
    stages are clearly unbalanced by the rule's figure (busiest stage's busy
    time over the mean, ~1.4), and whether the rule fires is the replay's
    call: balanced_stages' saving on its CPU graph (about 1.7% of the step,
    where the compute pieces' imbalance is ~1.13) against the rule's
    fire_share (seed finding_rules). One price, the replay's, decides."""
    fired = query_warehouse(reference.root, """
        select run_id, list(distinct rule_id order by rule_id)
        from fct_findings where status = 'fired' group by run_id order by run_id""")
    with capsys.disabled():
        for run_id, rules in fired:
            print(f"\nfindings fired on {run_id}: {', '.join(rules)}")
    assert dict(fired)  # the shared runs fire something (host_bound_launches at least)
    rows = query_warehouse(reference.root, """
        select findings.status, findings.priced_by, findings.figure, findings.threshold,
            findings.share_of_step, rules.fire_share
        from fct_findings as findings
        inner join seeds.finding_rules as rules using (rule_id)
        where findings.run_id = 'tp1_pp4_dp2' and findings.rule_id = 'stage_imbalance'""")
    assert rows, "stage_imbalance is evaluated on tp1_pp4_dp2"
    for status, priced_by, figure, threshold, share, fire_share in rows:
        assert figure > threshold, rows
        assert priced_by == "what_if", rows
        assert status == ("fired" if share >= fire_share else "passed"), rows


def test_cli_prints_fct_findings(reference: ReferenceWarehouse,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    run, iteration = query_warehouse(reference.root, """
        select run_id, iteration from fct_findings where status = 'fired'
        order by time_at_stake_ns desc limit 1""")[0]
    code = main(["findings", "--warehouse", str(reference.root), "--run", run,
                 "--iteration", str(iteration), "--format", "json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    expected = query_warehouse(reference.root, """
        select rule_id, time_at_stake_ns, figure from fct_findings
        where run_id = $run and iteration = $iteration and status = 'fired'
        order by finding_rank""", {"run": run, "iteration": iteration})
    assert [(row["rule_id"], row["time_at_stake_ns"], row["figure"]) for row in printed] \
        == [tuple(row) for row in expected]
    assert [row["rank"] for row in printed] == list(range(1, len(printed) + 1))

    # Summed over iterations: each rule's time at stake is the sum of its fired rows.
    assert main(["findings", "--warehouse", str(reference.root), "--run", run,
                 "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split(",")
    summed = dict(query_warehouse(reference.root, """
        select rule_id, sum(time_at_stake_ns) from fct_findings
        where run_id = $run and status = 'fired' group by rule_id""", {"run": run}))
    printed_sums = {line.split(",")[header.index("rule_id")]:
                    int(line.split(",")[header.index("time_at_stake_ns")]) for line in lines[1:]}
    assert printed_sums == summed

    # The table says which rules were not evaluated, and why.
    assert main(["findings", "--warehouse", str(reference.root), "--run", "tp1_pp4_dp2"]) == 0
    assert "not evaluated: tp1_pp4_dp2 recompute" in capsys.readouterr().out


def test_report_opens_with_the_findings(report_wh: ReportWarehouse, tmp_path: Path) -> None:
    from tracehouse.reports.report import render_report

    run = "sim_a"
    render_report(report_wh.root, tmp_path / "report", run_id=run, stream=io.StringIO())
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.index('id="findings"') < page.index('id="headline"')
    fired = query_warehouse(report_wh.root, """
        select rule_id, sum(time_at_stake_ns), any_value(title) from fct_findings
        where run_id = $run and status = 'fired'
        group by rule_id order by sum(time_at_stake_ns) desc, rule_id""", {"run": run})
    assert fired, "the simulated run fires nothing: the section would show no figure"
    for rule_id, time_at_stake_ns, title in fired:
        row = page[page.index(f'id="finding-{rule_id}"'):]
        row = row[:row.index("</tr>")]
        assert f"{time_at_stake_ns / 1e6:.3f} ms" in row, (rule_id, row)
        # The finding reads as the viewer's does: its title, the rule id small beneath
        # (kept whole: code.rule does not break inside a word, as the page's code does).
        assert title in html.unescape(row), (rule_id, row)
        assert f'<code class="rule">{rule_id}</code>' in row, (rule_id, row)
    assert "code.rule{" in page and "word-break:normal" in page
    order = [page.index(f'id="finding-{rule_id}"') for rule_id, _, _ in fired]
    assert order == sorted(order)


def test_viewer_findings_are_fct_findings(report_viewer: object,
                                          report_wh: ReportWarehouse) -> None:
    """``/api/findings``: the run's fired rules summed over iterations, in rank order, and
    one iteration's rows; the same rows the command and the report show."""
    from viewer import get

    run = report_wh.need("sim_a")
    shown = get(report_viewer, "findings", run=run)
    keys = [column["key"] for column in shown["findings"]["columns"]]
    at_stake = [(row["key"]["rule_id"], row["cells"][keys.index("time_at_stake_ns")][0])
                for row in shown["findings"]["rows"]]
    assert at_stake == [tuple(row) for row in report_wh.rows("""
        select rule_id, sum(time_at_stake_ns) from fct_findings
        where run_id = ? and status = 'fired'
        group by rule_id order by sum(time_at_stake_ns) desc, rule_id""", [run])]
    one = get(report_viewer, "findings", run=run, iteration=2)
    assert [row["key"]["rule_id"] for row in one["findings"]["rows"]] == [
        row[0] for row in report_wh.rows("""
            select rule_id from fct_findings where run_id = ? and iteration = 2
                and status = 'fired' order by finding_rank""", [run])]
