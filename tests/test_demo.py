"""``tracehouse demo`` runs end to end: simulate → ingest → dbt build → headline numbers."""

from __future__ import annotations

import csv
import html
import io
import re
import shlex
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs" / "demo_run"
    warehouse = tmp_path / "warehouse"
    assert main(["demo", "--out", str(run_dir), "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert "4/4 rendering the report" in out
    # Issue 29 item 13: the long step says how long it takes, before and after.
    assert "3/4 building the warehouse (dbt build, 10-20 s)" in out
    assert re.search(r"^    built in \d+\.\d s$", out, re.MULTILINE), out
    index = warehouse / "reports" / "demo_run" / "index.html"
    assert f"report: {index}" in out
    assert index.is_file() and "<img" in index.read_text()
    # Recorded with shapes: the efficiency charts (a bar per stage and model chunk) and
    # the roofline are drawn beside the MFU.
    for chart in ("efficiency_phase_stage", "roofline", "mfu_iterations"):
        assert (index.parent / f"{chart}.png").is_file(), chart
    assert "stage 3 · chunk 1" in (index.parent / "efficiency_phase_stage.svg").read_text()
    assert "rank 5 computes" in out  # the injected straggler is the slowest
    assert str(warehouse) in out
    assert (run_dir / "ground_truth.json").is_file()
    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    try:
        traces, ranks = con.execute(
            "select count(*), count(distinct rank) from stg_lake__traces where run_id = ?",
            ["demo_run"]).fetchone()
        straggler = con.execute("select straggler_rank from fct_run_summary "
                                "where run_id = ?", ["demo_run"]).fetchone()[0]
    finally:
        con.close()
    assert (traces, ranks) == (32, 16)
    _assert_what_would_help_most(index, warehouse, "demo_run")
    # The straggler line names the report's straggler (fct_run_summary), not another rank.
    assert straggler is not None
    assert f"straggler (fct_stragglers, as the report names it): rank {straggler}," in out

    # The suggested query, pasted as printed, puts the straggler on top.
    [suggested] = [line.removeprefix("try: ") for line in out.splitlines()
                   if line.startswith("try: ")]
    argv = shlex.split(suggested)
    assert argv[0] == "tracehouse"
    assert main([*argv[1:], "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["rank"] == "5"
    assert float(rows[0]["exposed_comm_ms"]) < min(float(r["exposed_comm_ms"]) for r in rows[1:])

    # Issue 29 item 10: the demo's build is recorded as the plain build it is, so the
    # next `tracehouse build` after loading more traces builds only what reads the
    # changed lake tables (no seeds, no full rebuild), and says so.
    if not DLRM.is_dir():
        return
    assert main(["ingest", str(DLRM), "--warehouse", str(warehouse), "-q"]) == 0
    capsys.readouterr()
    assert main(["build", "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert "lake tables changed since the last build: " in out, out[-2000:]
    assert "building every model" not in out and "--full-refresh" not in out


#: The standard what-if scenarios (fct_what_if; int_whatif_work_scaled's docstring).
STANDARD_SCENARIOS = {"no_straggler", "ideal_communication", "perfect_overlap",
                      "perfect_dp_overlap", "balanced_stages", "no_host_gaps"}


def _assert_what_would_help_most(index: Path, warehouse: Path, run_id: str) -> None:
    """The demo's plain build makes the what-if marts, so its report has the "What would
    help most" section: both charts, and the caption ranking every standard scenario
    with fct_what_if's figures (means over the iterations; share a ratio of sums),
    most time saved first."""
    page = index.read_text()
    start = page.index('<section id="family-whatif">')
    section = html.unescape(page[start:page.index("</section>", start)])
    assert "<h2>What would help most</h2>" in section
    assert 'id="chart-whatif_savings"' in section and 'id="chart-whatif_table"' in section
    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    try:
        rows = con.execute("""
            select scenario, avg(saved_ns), avg(step_ns), sum(saved_ns), sum(step_ns)
            from fct_what_if where run_id = ? group by scenario""", [run_id]).fetchall()
    finally:
        con.close()
    assert {row[0] for row in rows} == STANDARD_SCENARIOS
    ranked = sorted(rows, key=lambda row: (-row[1], row[0]))
    lines = [f"{scenario}: saves {saved / 1e6:.3f} ms of {step / 1e6:.3f} ms "
             f"({100 * saved_sum / step_sum:.1f} %)"
             for scenario, saved, step, saved_sum, step_sum in ranked]
    assert "Ranked: " + "; ".join(lines) + "." in section, section[:3000]
    # The injected straggler (rank 5, 1.5x) is worth something to remove.
    assert dict((row[0], row[1]) for row in rows)["no_straggler"] > 0


def test_suggested_command_quotes_hostile_run_names(tmp_path: Path) -> None:
    from tracehouse.cli.demo_run import suggested_command

    line = suggested_command("it's \"odd\" $(rm -rf /)", tmp_path / "my wh")
    argv = shlex.split(line)
    assert argv[-1] == str(tmp_path / "my wh")
    assert "run_id = 'it''s \"odd\" $(rm -rf /)'" in argv[2]
