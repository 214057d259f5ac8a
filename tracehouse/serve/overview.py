"""The runs, and one run's overview: the report's headline, its iterations side by side.

Why the headline comes from :func:`tracehouse.reports.html.gather_page`:
the issue's rule is one answer per question, so the viewer must show the
report's numbers, not numbers of its own. Calling the report's gatherer
(which reads ``fct_run_summary``, ``fct_rank_summary``, ``fct_stage_summary``
and ``fct_run_kernel_summary``) makes that true by construction. The
iterations table is ``fct_iteration_summary``, one column per iteration,
its shares shown as the report shows the run's (the timing source's parts,
rounded so that they add up to 100 %).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import duckdb

from tracehouse.reports.html import STEP_PARTS, gather_page, layout, pct_parts
from tracehouse.serve.cells import cell, iteration_label, plain, table
from tracehouse.serve.marts import Selection, columns, first_row, rows, tables
from tracehouse.serve.params import WHOLE_TRACE, BadRequest, Params
from tracehouse.serve.step_parts import step_parts


def run_list(cur: duckdb.DuckDBPyConnection, _params: Params) -> dict[str, Any]:
    """Every run of ``fct_run_summary``: name, timing source, layout, ranks, iterations."""
    if "fct_run_summary" not in tables(cur):
        return {"runs": []}
    found = rows(cur, "select * from fct_run_summary order by run_id")
    return {"runs": [{
        "run_id": run["run_id"],
        "timing": run.get("timing_source") or "none",
        "layout": layout(run),
        "ranks": cell(run.get("ranks"), "int"),
        "iterations": cell(run.get("iterations"), "int"),
        "mean_step": cell(run.get("mean_step_ns"), "ms"),
    } for run in found]}


def known_run(cur: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Raise :class:`BadRequest` unless ``fct_run_summary`` has ``run_id``."""
    present = tables(cur)
    table = "fct_run_summary" if "fct_run_summary" in present else "fct_rank_iterations"
    # ``table`` is one of two fixed names, never from the request.
    found = first_row(cur, f"select count(*) from {table} where run_id = ?",  # noqa: S608
                      [run_id])
    if not found or not found[0]:
        raise BadRequest(f"unknown run {run_id!r}")


def requested_run(cur: duckdb.DuckDBPyConnection, params: Params, *needs: str) -> str:
    """The request's ``run``, checked against the marts, whose ``needs`` must all exist."""
    run_id = params.text("run")
    known_run(cur, run_id)
    missing = [mart for mart in needs if mart not in tables(cur)]
    if missing:
        raise BadRequest(f"the warehouse has no {', '.join(missing)}; this view reads "
                         f"{'it' if len(missing) == 1 else 'them'} (rebuild with tracehouse "
                         "build)")
    return run_id


def iteration_rows(cur: duckdb.DuckDBPyConnection, params: Params, mart: str, name: str,
                   order: str, condition: str = "") -> Selection:
    """A mart's rows of the request's run and ``iteration`` (and ``condition``, fixed text)."""
    run_id = requested_run(cur, params, mart)
    iteration = params.iteration()
    # ``mart`` and ``condition`` are the callers' fixed text; the values are bound.
    return Selection(f"{run_id}-{name}-{iteration_label(iteration)}",
                     f"select * from {mart} where run_id = $run and "  # noqa: S608
                     f"iteration is not distinct from $iteration{condition}",
                     {"run": run_id, "iteration": iteration}, order)


def run_overview(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The report's headline and offenders, the top kernels, the iterations, the heatmap's parts."""
    run_id = requested_run(cur, params)
    page = gather_page(cur, run_id)
    top = table([("name", "kernel", "text"), ("kind", "kind", "text"),
                 ("calls", "calls", "int"), ("ranks", "ranks", "int"),
                 ("total_ns", "total", "ms"), ("share", "share", "pct")], page.top_kernels)
    return {
        "run_id": run_id,
        "timing": page.timing,
        "layout": page.layout,
        "notes": page.notes,
        "headline": [asdict(figure) for figure in page.headline],
        "offenders": [asdict(offender) for offender in page.offenders],
        "top_kernels": top,
        "iterations": iterations_side_by_side(cur, run_id, page.timing),
        "step_parts": [asdict(part) for part in
                       step_parts(page.timing, columns(cur, "fct_rank_iterations"))],
    }


def iterations_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """The run's rows of ``fct_iteration_summary`` (the iterations side by side)."""
    run_id = requested_run(cur, params, "fct_iteration_summary")
    return Selection(f"{run_id}-iterations",
                     "select * from fct_iteration_summary where run_id = $run",
                     {"run": run_id}, "iteration nulls first")


def iterations_side_by_side(cur: duckdb.DuckDBPyConnection, run_id: str,
                            timing: str) -> dict[str, Any]:
    """``fct_iteration_summary`` of the run, one column per iteration, one row per figure."""
    if "fct_iteration_summary" not in tables(cur):
        return {"iterations": [], "rows": []}
    found = rows(cur, "select * from fct_iteration_summary where run_id = ? "
                      "order by iteration nulls first", [run_id])
    figures: list[tuple[str, str, str]] = [
        ("step_ns", "step (slowest rank)", "ms"),
        ("mean_step_ns", "mean step over ranks", "ms"),
        ("min_step_ns", "fastest rank's step", "ms"),
        ("ranks", "ranks", "int"),
        ("slowest_rank", "slowest rank", "int"),
        ("straggler_rank", "straggler (caused the most waiting)", "int"),
        ("straggler_wait_caused_ns", "waiting the straggler caused", "ms"),
        ("worst_skew_op", "worst-skew collective", "text"),
        ("worst_skew_process_group", "its group", "text"),
        ("worst_skew_ns", "its start skew", "ms"),
    ]
    out_rows = [{"label": label, "cells": [cell(row.get(column), kind) for row in found]}
                for column, label, kind in figures]
    parts = STEP_PARTS.get(timing, ())
    if parts:
        texts = [pct_parts([row.get(column) for column, _, _ in parts]) for row in found]
        out_rows += [{"label": f"{label} (share)",
                      "cells": [[plain(row.get(column)), texts[i][index]]
                                for i, row in enumerate(found)]}
                     for index, (column, label, _note) in enumerate(parts)]
    extra = [("bubble_ratio", "pipeline bubble", "pct"),
             ("theoretical_bubble_ratio", "theoretical bubble", "pct")]
    if timing == "gpu":
        extra.insert(0, ("overlap_ratio", "overlap ratio", "pct"))
    out_rows += [{"label": label, "cells": [cell(row.get(column), kind) for row in found]}
                 for column, label, kind in extra]
    return {
        "iterations": [{"label": iteration_label(row["iteration"]),
                        "key": WHOLE_TRACE if row["iteration"] is None else row["iteration"]}
                       for row in found],
        "rows": out_rows,
    }
