"""Rank × iteration grid of the step or one of its parts (``fct_rank_iterations``).

Why a grid of raw values and not an image: the page draws it on a canvas
(one cell per rank and iteration, 4,096 cells at 1,024 ranks × 4
iterations is a few tens of kB of JSON), colours it, names the cell under
the pointer and turns a click into the rank's iteration. The column is
chosen from :func:`tracehouse.serve.step_parts.step_parts` (the YAML's
step_part columns) and checked against it before it is quoted into the
query: the request names a column, it never writes SQL.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.reports.html import rank_label, timing_source
from tracehouse.serve.cells import iteration_label, plain
from tracehouse.serve.marts import Selection, columns, rows
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import WHOLE_TRACE, BadRequest, Params
from tracehouse.serve.step_parts import STEP_COLUMN, step_parts


def heatmap_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """The run's rows of ``fct_rank_iterations`` with a step: every part of every cell."""
    run_id = requested_run(cur, params, "fct_rank_iterations")
    return Selection(f"{run_id}-rank-iterations",
                     "select * from fct_rank_iterations where run_id = $run "
                     "and step_ns is not null", {"run": run_id}, "rank, iteration nulls first")


def heatmap(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """Values of one step part for every rank (rows) and iteration (columns) of a run."""
    run_id = requested_run(cur, params, "fct_rank_iterations")
    timing = timing_source(cur, run_id)
    offered = {part.column: part.label
               for part in step_parts(timing, columns(cur, "fct_rank_iterations"))}
    column = params.text("part", STEP_COLUMN)
    if column not in offered:
        raise BadRequest(f"parameter 'part' must be one of {', '.join(offered)}, not {column!r}")
    quoted = '"' + column.replace('"', '""') + '"'
    found = rows(cur, f"""
        select rank, iteration, {quoted} as value, pp_stage, tp_rank, dp_rank
        from fct_rank_iterations
        where run_id = ? and step_ns is not null
        order by rank, iteration nulls first
    """, [run_id])  # noqa: S608 - the column is one of the offered names, quoted
    ranks = sorted({row["rank"] for row in found})
    iterations = sorted({row["iteration"] for row in found},
                        key=lambda it: (it is not None, it or 0))
    rank_index = {rank: index for index, rank in enumerate(ranks)}
    iteration_index = {it: index for index, it in enumerate(iterations)}
    values: list[Any] = [None] * (len(ranks) * len(iterations))
    labels = {}
    for row in found:
        values[rank_index[row["rank"]] * len(iterations) + iteration_index[row["iteration"]]] = \
            plain(row["value"])
        labels[row["rank"]] = rank_label(row)
    present = [value for value in values if value is not None]
    return {
        "part": column,
        "label": offered[column],
        "ranks": [{"rank": rank, "label": labels[rank]} for rank in ranks],
        "iterations": [{"label": iteration_label(it), "key": WHOLE_TRACE if it is None else it}
                       for it in iterations],
        "values": values,
        "min": min(present, default=None),
        "max": max(present, default=None),
    }
