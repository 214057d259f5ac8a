"""``tracehouse serve``'s JSON views against the marts they read, over HTTP.

On the report tests' shared warehouse (real ingest and dbt build; read-only):
the overview's headline is the report's own (``gather_page``), the heatmap
and the drill-in views are ``fct_rank_iterations``' rows, the kernels table
is ``fct_kernels`` sorted, filtered and paged in SQL. On a private copy: a
build that publishes while the viewer serves is neither blocked nor seen
half-done.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import duckdb
import pytest

from conftest import copy_warehouse
from report_warehouse import HOSTILE_KERNEL, ReportWarehouse
from tracehouse.core.publish import prepare_copy, publish_copy
from tracehouse.core.warehouse import Warehouse
from tracehouse.reports.html import gather_page
from tracehouse.serve.kernels import PAGE_ROWS
from tracehouse.serve.server import ViewerServer
from viewer import get, serving

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


def test_the_headline_is_the_reports(report_viewer: ViewerServer,
                                     report_wh: ReportWarehouse) -> None:
    con = duckdb.connect(str(Warehouse(report_wh.root).database), read_only=True)
    try:
        for run in report_wh.runs:
            page = gather_page(con, run)
            shown = get(report_viewer, "overview", run=run)
            assert shown["headline"] == [asdict(figure) for figure in page.headline], run
            assert shown["offenders"] == [asdict(o) for o in page.offenders], run
            assert shown["timing"] == page.timing
    finally:
        con.close()


def test_iterations_side_by_side_are_the_iteration_summary(
        report_viewer: ViewerServer, report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    shown = get(report_viewer, "overview", run=run)["iterations"]
    expected = report_wh.rows("select iteration, step_ns, straggler_rank, bubble_ratio "
                              "from fct_iteration_summary where run_id = ? order by iteration",
                              [run])
    by_label = {row["label"]: [raw for raw, _text in row["cells"]] for row in shown["rows"]}
    assert [it["key"] for it in shown["iterations"]] == [row[0] for row in expected]
    assert by_label["step (slowest rank)"] == [row[1] for row in expected]
    assert by_label["straggler (caused the most waiting)"] == [row[2] for row in expected]
    assert by_label["pipeline bubble"] == [row[3] for row in expected]


@pytest.mark.parametrize("part", ["step_ns", "step_compute_ns", "step_idle_ns"])
def test_the_heatmap_is_fct_rank_iterations(report_viewer: ViewerServer, report_wh: ReportWarehouse,
                                            part: str) -> None:
    run = report_wh.need("sim_a")
    shown = get(report_viewer, "heatmap", run=run, part=part)
    cells = {(rank["rank"], iteration["key"]): shown["values"][i * len(shown["iterations"]) + j]
             for i, rank in enumerate(shown["ranks"])
             for j, iteration in enumerate(shown["iterations"])}
    mart = {(rank, iteration): value for rank, iteration, value in report_wh.rows(
        f"select rank, iteration, {part} from fct_rank_iterations "  # a fixed column name
        "where run_id = ? and step_ns is not null", [run])}
    assert cells == mart
    assert (shown["min"], shown["max"]) == (min(mart.values()), max(mart.values()))


def test_kernels_are_sorted_filtered_and_paged_in_sql(report_viewer: ViewerServer,
                                                      report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    rank, iteration = 0, 1
    names = [name for (name,) in report_wh.rows(
        "select name from fct_kernels where run_id = ? and rank = ? and iteration = ? "
        "order by name, ts_ns, slice_id", [run, rank, iteration])]
    assert len(names) > PAGE_ROWS  # paging is exercised
    where = {"run": run, "rank": rank, "iteration": iteration}
    first = get(report_viewer, "kernels", **where, sort="name")
    second = get(report_viewer, "kernels", **where, sort="name", offset=PAGE_ROWS)
    assert first["total"] == second["total"] == len(names)
    column = [c["key"] for c in first["kernels"]["columns"]].index("name")
    shown = [row["cells"][column][0] for page in (first, second)
             for row in page["kernels"]["rows"]]
    assert shown == names

    # A filter is a substring, not a LIKE pattern: '_' is an underscore, '%' matches nothing.
    underscore = get(report_viewer, "kernels", **where, q="_")
    assert underscore["total"] == sum("_" in name for name in names)
    assert get(report_viewer, "kernels", **where, q="%")["total"] == 0


def test_a_hostile_name_filters_and_opens(report_viewer: ViewerServer,
                                          report_wh: ReportWarehouse) -> None:
    run = report_wh.need("hostile")
    found = get(report_viewer, "kernels", run=run, rank=0, iteration=1, q=HOSTILE_KERNEL)
    assert found["total"] == 1
    key = found["kernels"]["rows"][0]["key"]
    detail = get(report_viewer, "kernel", run=run, trace=key["trace_id"], slice=key["slice_id"])
    assert {f["column"]: f["value"][1] for f in detail["fields"]}["name"] == HOSTILE_KERNEL


def test_a_build_publishing_beside_it_is_not_blocked_and_is_seen_next(
        report_wh: ReportWarehouse, tmp_path: Path) -> None:
    """What ``tracehouse build`` does (tracehouse.core.publish): write a copy, rename it over."""
    root = copy_warehouse(report_wh.root, tmp_path / "warehouse")
    with serving(root) as running:
        before = {run["run_id"] for run in get(running, "runs")["runs"]}
        assert "cpu_ops" in before
        copy = prepare_copy(root)
        writer = duckdb.connect(str(copy))  # a writer, while the viewer holds its reader
        writer.execute("delete from fct_run_summary where run_id = 'cpu_ops'")
        writer.close()
        assert {run["run_id"] for run in get(running, "runs")["runs"]} == before  # not yet
        publish_copy(root)
        assert {run["run_id"] for run in get(running, "runs")["runs"]} == before - {"cpu_ops"}
