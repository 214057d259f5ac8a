"""Two runs compared: ``tracehouse compare``'s table, iterations paired by order.

Why its query and not one of our own: ``tracehouse compare`` already pairs
two runs' ``fct_iteration_summary`` rows and puts the runs' own
``fct_run_summary`` figures in a last row; the viewer runs the very same
query (:func:`tracehouse.query.compare_runs.comparison_sql`, which quotes
the run names as SQL literals) after checking both runs exist, so the page
and the command cannot disagree.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.query.compare_runs import comparison_sql
from tracehouse.serve.cells import cell
from tracehouse.serve.overview import known_run, requested_run
from tracehouse.serve.params import BadRequest, Params


def compare(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The two runs' iterations side by side and their run figures (``tracehouse compare``)."""
    run_a = requested_run(cur, params, "fct_iteration_summary", "fct_run_summary")
    run_b = params.text("other")
    known_run(cur, run_b)
    if run_b == run_a:
        raise BadRequest("compare a run with another run, not with itself")
    result = cur.execute(comparison_sql(run_a, run_b))
    names = [column[0] for column in result.description]
    return {
        "run_a": run_a,
        "run_b": run_b,
        "table": {
            "columns": [{"key": name, "label": name, "numeric": index > 0}
                        for index, name in enumerate(names)],
            "rows": [{"key": {}, "cells": [cell(value, "text") for value in row]}
                     for row in result.fetchall()],
        },
    }
