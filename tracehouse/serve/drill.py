"""Drilling in: an iteration's ranks, a rank's iteration (its step parts), one kernel.

Why three small views rather than one: each answers its own question from
its own mart rows. An iteration lists its ranks (``fct_rank_iterations``,
slowest first); a rank's iteration shows its step window and exclusive
parts (the same row, the parts adding up to the step) and hands over to the
kernels table (:mod:`tracehouse.serve.kernels`); a kernel shows every
column ``fct_kernels`` has for it. No figure is computed here.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.reports.html import rank_label, timing_source
from tracehouse.serve.cells import cell, iteration_label, plain, table
from tracehouse.serve.marts import Selection, columns, rows
from tracehouse.serve.overview import iteration_rows, requested_run
from tracehouse.serve.params import BadRequest, Params
from tracehouse.serve.step_parts import STEP_COLUMN, step_parts
from tracehouse.serve.timeline import run_origin

#: Rank coordinates shown beside each rank (dim_ranks' columns, carried by the mart).
COORDINATES = (("pp_stage", "pp stage"), ("tp_rank", "tp"), ("cp_rank", "cp"),
               ("dp_rank", "dp"), ("host_name", "host"))


def _parts(cur: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, str]]:
    """The step and its parts as table columns ``(column, heading, ms)``."""
    return [(part.column, part.label, "ms") for part in
            step_parts(timing_source(cur, run_id), columns(cur, "fct_rank_iterations"))]


def iteration_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """An iteration's rows of ``fct_rank_iterations`` (the ranks with a step), slowest first."""
    return iteration_rows(cur, params, "fct_rank_iterations", "iteration",
                          "step_ns desc, rank", " and step_ns is not null")


def iteration_ranks(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """Every rank's step and parts in one iteration, slowest first."""
    selection = iteration_selection(cur, params)
    run_id, iteration = selection.params["run"], selection.params["iteration"]
    found = rows(cur, selection.ordered, selection.params)
    for row in found:
        row["label"] = rank_label(row)
    shown = [("label", "rank", "text"), *_parts(cur, run_id),
             *((column, heading, "int" if column != "host_name" else "text")
               for column, heading in COORDINATES)]
    return {"run_id": run_id, "iteration": iteration_label(iteration),
            "ranks": table(shown, found, key=("rank",))}


def rank_iteration(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """One rank's step in one iteration: its window, its parts (adding up to the step)."""
    run_id = requested_run(cur, params, "fct_rank_iterations")
    rank = params.integer("rank", low=0)
    iteration = params.iteration()
    found = rows(cur, """
        select * from fct_rank_iterations
        where run_id = ? and rank = ? and iteration is not distinct from ?
    """, [run_id, rank, iteration])
    if not found:
        raise BadRequest(f"run {run_id!r} has no rank {rank} in iteration "
                         f"{iteration_label(iteration)}")
    row = found[0]
    parts = _parts(cur, run_id)
    return {
        "run_id": run_id,
        "rank": rank,
        "label": rank_label(row),
        "iteration": iteration_label(iteration),
        "timing": row.get("timing_source"),
        "step_rule": row.get("step_rule"),
        "step": cell(row.get(STEP_COLUMN), "ms"),
        "parts": [{"column": column, "label": heading, "value": cell(row.get(column), "ms")}
                  for column, heading, _ in parts if column != STEP_COLUMN],
        "figures": [
            {"label": label, "value": cell(row.get(column), kind)} for column, label, kind in (
                ("kernel_count", "kernels", "int"), ("span_ns", "span of its kernels", "ms"),
                ("compute_ns", "compute (union)", "ms"),
                ("communication_ns", "communication (union)", "ms"),
                ("overlap_ratio", "overlap ratio", "pct"),
                ("gpu_lag_ns", "GPU behind the host by", "ms"),
                ("clock_offset_ns", "clock offset", "ms"))
            if column in row],
        # The step on the timeline's axis: ns after the run's origin, on the reference clock.
        "window": _window(cur, run_id, row),
    }


def _window(cur: duckdb.DuckDBPyConnection, run_id: str,
            row: dict[str, Any]) -> list[int] | None:
    if row.get("aligned_step_start_ns") is None or row.get(STEP_COLUMN) is None:
        return None
    start = int(row["aligned_step_start_ns"]) - run_origin(cur, run_id)
    return [start, start + int(row[STEP_COLUMN])]


def kernel_detail(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """Every column ``fct_kernels`` holds for one kernel, by its key (trace, slice)."""
    run_id = requested_run(cur, params, "fct_kernels")
    trace_id = params.text("trace")
    slice_id = params.integer("slice")
    found = rows(cur, "select * from fct_kernels where run_id = ? and trace_id = ? "
                      "and slice_id = ?", [run_id, trace_id, slice_id])
    if not found:
        raise BadRequest(f"no kernel {slice_id} in trace {trace_id!r} of run {run_id!r}")
    return {"run_id": run_id,
            "fields": [{"column": column, "value": [plain(value), _field_text(column, value)]}
                       for column, value in found[0].items()]}


def _field_text(column: str, value: Any) -> str:
    """A kernel's column as text: durations in µs, the rest as stored."""
    if column == "dur_ns":
        return cell(value, "us")[1]
    return cell(value, "text")[1]
