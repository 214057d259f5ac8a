"""What to change: a run's findings, ranked by time at stake, for the viewer's first page.

Why this view: the marts hold every figure, ``fct_findings`` says which ones
matter and what to change; the page opens on them. The rows are
:func:`tracehouse.query.findings.query_findings`' (what ``tracehouse
findings --run`` prints and the report's first section shows), so the three
agree; each finding carries the evidence figure, the mart it comes from and
the view that shows it (``shown_in``). Without ``iteration`` the run's rules
are summed over its iterations; with it, that iteration's. Rules that could
not be evaluated come with the reason.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.query.findings import query_findings
from tracehouse.reports.findings import figure_text
from tracehouse.serve.cells import table
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import Params

#: (column, heading, kind) of the findings table; the keys let a click open the evidence.
COLUMNS = (
    ("rank", "#", "int"), ("rule_id", "finding", "text"), ("severity", "severity", "text"),
    ("time_at_stake_ns", "time at stake", "ms"), ("subject", "about", "text"),
    ("figure_name", "figure", "text"), ("figure_text", "value", "text"),
    ("threshold_text", "threshold", "text"), ("evidence_mart", "from", "text"),
    ("megatron_flags", "Megatron-LM flags", "text"), ("recommendation", "change", "text"),
    ("shown_in", "shown in", "text"),
)


def findings(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The run's fired findings (summed over iterations, or one ``iteration``), ranked,
    and the rules not evaluated with their reason."""
    run_id = requested_run(cur, params, "fct_findings", "fct_iteration_summary")
    iteration = params.integer("iteration") if params.optional_text("iteration") else None
    found = query_findings(cur, run_id, iteration)
    records = [dict(zip(found.columns, values, strict=True)) for values in found.rows]
    for record in records:
        record["figure_text"] = figure_text(record["figure"])
        record["threshold_text"] = f"{record['fires_when']} {figure_text(record['threshold'])}"
    share = "share_of_step" if iteration is not None else "share_of_run"
    return {
        "run_id": run_id,
        "iteration": iteration,
        "findings": table([*COLUMNS[:4], (share, "share", "pct"), *COLUMNS[4:]], records,
                          key=("rule_id", "evidence_rank", "evidence_pp_group_index")),
        "not_evaluated": [{"rule_id": rule_id, "reason": reason, "iterations": count}
                          for _, rule_id, reason, count in found.not_evaluated],
    }
