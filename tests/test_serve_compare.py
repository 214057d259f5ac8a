"""The viewer's two-run comparison is ``tracehouse compare``'s table.

On the report tests' shared warehouse (``sim_a`` with a straggler against
``sim_b`` without; read-only): the answer is exactly the rows of
:func:`tracehouse.query.compare_runs.comparison_sql`, and in Chromium the
overview's "compare with" choice opens it.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from browser import chromium_page
from report_warehouse import ReportWarehouse
from tracehouse.query.compare_runs import comparison_sql
from tracehouse.serve.server import ViewerServer
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


def test_the_comparison_is_tracehouse_compares(report_viewer: ViewerServer,
                                               report_wh: ReportWarehouse) -> None:
    run_a, run_b = report_wh.need("sim_a"), report_wh.need("sim_b")
    shown = get(report_viewer, "compare", run=run_a, other=run_b)
    expected = report_wh.rows(comparison_sql(run_a, run_b))
    assert [tuple(cell[0] for cell in row["cells"]) for row in shown["table"]["rows"]] == [
        tuple(value for value in row) for row in expected]
    assert shown["table"]["rows"][-1]["cells"][0][1] == "run"
    with pytest.raises(AssertionError, match="400: .*unknown run"):
        get(report_viewer, "compare", run=run_a, other="it's")
    with pytest.raises(AssertionError, match="400: .*not with itself"):
        get(report_viewer, "compare", run=run_a, other=run_a)


def test_the_overview_opens_the_comparison(report_viewer: ViewerServer,
                                           report_wh: ReportWarehouse) -> None:
    run_a, run_b = report_wh.need("sim_a"), report_wh.need("sim_b")
    with chromium_page() as page:
        page.open(f"{report_viewer.url}#/run?{urlencode({'run': run_a})}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.getElementById('compare-with')", "the overview")
        page.evaluate(f"(() => {{ const s = document.getElementById('compare-with'); "
                      f"s.value = {run_b!r}; s.dispatchEvent(new Event('change')); }})()")
        page.wait_for("document.getElementById('view')?.dataset.view === 'compare' && "
                      "document.querySelector('table.compare tbody tr')", "the comparison")
        first = page.evaluate("[...document.querySelector('table.compare tbody tr').cells]"
                              ".map(c => c.dataset.value)")
        row = report_wh.rows(comparison_sql(run_a, run_b))[0]
        assert first[3] == str(row[3])  # step ms A, as tracehouse compare prints it
        assert page.console == [] and page.dialogs == []
