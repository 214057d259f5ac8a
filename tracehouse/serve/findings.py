"""What to change: a run's findings, ranked by time at stake, for the viewer's first page.

Why this view: the marts hold every figure, ``fct_findings`` says which ones
matter and what to change; the page opens on them. The rows are
:func:`tracehouse.query.findings.query_findings`' (what ``tracehouse
findings --run`` prints and the report's first section shows), so the three
agree; each finding carries the rule's title (``fct_findings.title``, which
the command leaves out), the evidence figure against its threshold, the mart
it comes from and a link to the view that shows it (:mod:`.finding_links`,
from ``shown_in``). Every figure travels as ``[mart value, text]``, the text
formatted as the report formats it, so the page formats nothing. Without
``iteration`` the run's rules are summed over its iterations; with it, that
iteration's. Rules that could not be evaluated come with the reason.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.query.findings import query_findings
from tracehouse.serve.cells import table
from tracehouse.serve.finding_links import finding_link
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import Params
from tracehouse.serve.timeline import iteration_windows

#: (column, heading, kind) of the findings table; the keys let a click open the evidence.
#: ``share`` is of the iteration's step, or of the run's steps when summed over iterations.
COLUMNS = (
    ("rank", "#", "int"), ("rule_id", "rule", "text"), ("title", "finding", "text"),
    ("severity", "severity", "text"), ("time_at_stake_ns", "time at stake", "ms"),
    ("share", "share", "pct"), ("iterations_fired", "fired in", "text"),
    ("subject", "about", "text"), ("history", "history", "text"),
    ("figure_name", "figure", "text"), ("figure", "value", "figure"),
    ("fires_when", "fires when", "text"), ("threshold", "threshold", "figure"),
    ("baseline_name", "baseline", "text"), ("baseline", "baseline value", "figure"),
    ("evidence_mart", "from", "text"), ("priced_by", "priced by", "text"),
    ("megatron_flags", "Megatron-LM flags", "text"), ("recommendation", "change", "text"),
    ("doc_reference", "documentation", "text"), ("shown_in", "shown in", "text"),
)


def findings(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The run's fired findings (summed over iterations, or one ``iteration``), ranked,
    each with the view that shows its evidence (``link``, None where the viewer has no
    such view) and the iteration it comes from; and the rules not evaluated, with why."""
    run_id = requested_run(cur, params, "fct_findings", "fct_iteration_summary")
    iteration = params.integer("iteration") if params.optional_text("iteration") else None
    found = query_findings(cur, run_id, iteration)
    titles = dict(cur.execute("select distinct rule_id, title from fct_findings "
                              "where run_id = ?", [run_id]).fetchall())
    windows = iteration_windows(cur, run_id) if found.rows else []
    records = [dict(zip(found.columns, values, strict=True)) for values in found.rows]
    for record in records:
        record["title"] = titles.get(record["rule_id"])
        record["share"] = record["share_of_step" if iteration is not None else "share_of_run"]
        record["evidence_iteration"] = (iteration if iteration is not None
                                        else record["worst_iteration"])
    shown = table(COLUMNS, records,
                  key=("rule_id", "evidence_rank", "evidence_pp_group_index",
                       "evidence_iteration"))
    for row, record in zip(shown["rows"], records, strict=True):
        row["link"] = finding_link(record, run_id, record["evidence_iteration"], windows)
    return {
        "run_id": run_id,
        "iteration": iteration,
        "share_of": "of the step" if iteration is not None else "of the run's steps",
        "findings": shown,
        "not_evaluated": [{"rule_id": rule_id, "title": titles.get(rule_id), "reason": reason,
                           "iterations": count}
                          for _, rule_id, reason, count in found.not_evaluated],
    }
