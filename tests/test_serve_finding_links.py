"""Which view a finding's link opens: the seed's ``shown_in`` and the finding's evidence keys.

Fast: the seed itself (seeds/finding_rules.csv) and hand-written evidence
rows; the browser test (test_serve_browser.py) clicks the links on a built
warehouse.
"""

from __future__ import annotations

import csv
from pathlib import Path

from tracehouse.serve.finding_links import VIEWS, finding_link, serve_view

SEED = Path(__file__).resolve().parents[1] / "seeds" / "finding_rules.csv"
WINDOWS = [{"label": "1", "key": 1, "start": 0, "end": 900},
           {"label": "2", "key": 2, "start": 1000, "end": 1900}]


def _shown_in() -> dict[str, str]:
    with SEED.open(newline="") as seed:
        return {row["rule_id"]: row["shown_in"] for row in csv.DictReader(seed)}


def test_every_rules_view_is_one_the_viewer_has_or_the_report_alone() -> None:
    """A rule whose ``serve:`` view the viewer lacks gets no link; today only the roofline."""
    views = {rule: serve_view(shown_in) for rule, shown_in in _shown_in().items()}
    assert set(views.values()) - set(VIEWS) == {"efficiency"}
    assert {rule for rule, view in views.items() if view == "efficiency"} == {"low_gemm_mfu"}
    assert serve_view("report: kernels") is None
    assert serve_view(None) is None


def test_a_straggler_opens_who_waited_for_whom_in_its_iteration() -> None:
    link = finding_link({"shown_in": _shown_in()["straggler"], "evidence_rank": 5}, "r", 2,
                        WINDOWS)
    assert link == {"view": "stragglers", "params": {"run": "r", "iteration": 2},
                    "text": "who waited for whom · iteration 2"}


def test_a_pipeline_finding_opens_its_pp_group() -> None:
    record = {"shown_in": _shown_in()["stage_imbalance"], "evidence_pp_group_index": 3}
    link = finding_link(record, "r", 1, WINDOWS)
    assert link is not None
    assert (link["view"], link["params"]) == ("pipeline", {"run": "r", "iteration": 1,
                                                           "group": 3})


def test_a_rank_finding_opens_that_rank_over_its_iterations_window() -> None:
    record = {"shown_in": _shown_in()["host_bound_launches"], "evidence_rank": 7}
    link = finding_link(record, "r", 2, WINDOWS)
    assert link is not None
    assert (link["view"], link["params"]) == ("timeline", {"run": "r", "ranks": "7",
                                                           "start": 1000, "end": 1900})
    # No rank (a finding about a whole group or run, e.g. clock skew; the exposed
    # communication rules name the rank that sets the step): the timeline's own
    # choice of ranks, same window;
    # a whole-trace finding (iteration NULL) without a window: no window either.
    record = {"shown_in": _shown_in()["exposed_tp_comm"], "evidence_rank": None}
    assert finding_link(record, "r", 2, WINDOWS)["params"] == {"run": "r", "start": 1000,
                                                                "end": 1900}
    assert finding_link(record, "r", None, WINDOWS)["params"] == {"run": "r"}


def test_a_view_the_viewer_lacks_gets_no_link() -> None:
    assert finding_link({"shown_in": _shown_in()["low_gemm_mfu"]}, "r", 1, WINDOWS) is None
