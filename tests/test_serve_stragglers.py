"""The viewer's "who waited for whom": ``fct_stragglers`` and ``fct_collectives`` of an iteration.

On the report tests' shared warehouse (``sim_a``: rank 1 slowed 1.5×; read-only):
the tables are the marts' rows in the marts' order, the collectives sorted
and filtered in SQL; a collective's row opens its members on the timeline,
where its chain of arrivals is drawn.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from browser import chromium_page
from report_warehouse import ReportWarehouse
from tracehouse.serve.server import ViewerServer
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


def test_the_tables_are_the_marts(report_viewer: ViewerServer,
                                  report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    shown = get(report_viewer, "stragglers", run=run, iteration=2)
    assert [[cell[0] for cell in row["cells"][:4]] for row in shown["stragglers"]["rows"]] == [
        list(row) for row in report_wh.rows(
            "select straggler_rank, rank, pp_stage, wait_caused_ns from fct_stragglers "
            "where run_id = ? and iteration = 2 order by straggler_rank nulls last, rank",
            [run])]
    expected = report_wh.rows(
        "select collective_id, start_skew_ns from fct_collectives where run_id = ? "
        "and iteration = 2 order by start_skew_ns desc nulls last, collective_id", [run])
    assert shown["total"] == len(expected)
    skew = [c["key"] for c in shown["collectives"]["columns"]].index("start_skew_ns")
    assert [(row["key"]["collective_id"], row["cells"][skew][0])
            for row in shown["collectives"]["rows"]] == expected[:shown["page_rows"]]

    by_wait = get(report_viewer, "stragglers", run=run, iteration=2,
                  sort="last_rank_wait_caused_ns", q="PP:")
    assert by_wait["total"] == len(report_wh.rows(
        "select 1 from fct_collectives where run_id = ? and iteration = 2 "
        "and contains(lower(process_group_key), 'pp:')", [run])) > 0


def test_a_collective_opens_its_chain_on_the_timeline(report_viewer: ViewerServer,
                                                      report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    worst = get(report_viewer, "stragglers", run=run, iteration=2)["collectives"]["rows"][0]
    key = worst["key"]
    members = report_wh.rows("select rank, is_last from fct_collective_ranks where run_id = ? "
                             "and collective_id = ? order by arrival_order, rank",
                             [run, key["collective_id"]])
    assert key["ranks"] == sorted(rank for rank, _ in members)
    timeline = get(report_viewer, "timeline", run=run, ranks=",".join(map(str, key["ranks"])),
                   start=key["window"][0], end=key["window"][1])
    chains = [[(timeline["lanes"][lane]["rank"], last)
               for lane, _arrival, _end, _wait, last in link["members"]]
              for link in timeline["links"]]
    assert [tuple(member) for member in members] in [[tuple(m) for m in c] for c in chains]

    with chromium_page() as page:
        page.open(f"{report_viewer.url}#/stragglers?"
                  f"{urlencode({'run': run, 'iteration': 2})}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.querySelector('table.collectives tbody tr')", "the tables")
        page.click("document.querySelector('table.collectives tbody tr')")
        page.wait_for("document.getElementById('view')?.dataset.view === 'timeline' && "
                      "document.getElementById('timeline')?.dataset.lanes", "the timeline")
        status = page.evaluate("document.getElementById('timeline-status').textContent")
        assert "collectives linked" in status and not status.endswith(" 0 collectives linked")
        assert page.console == [] and page.dialogs == []
