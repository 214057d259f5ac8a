"""The pipeline view: a pipeline group's iteration as a Gantt of microbatches, bubbles shaded.

Why from these marts: ``fct_pipeline_bubbles`` (run × pp group × iteration ×
stage) holds the group's window, each stage's busy time and bubble, and
``fct_pipeline_bubble_parts`` splits each stage's bubble into warm-up,
steady and cool-down and into what filled it (P2P, gradient-sync and other
collective waits, other kernels, idle); ``fct_microbatch_phases`` holds each
stage's forward/backward (and recompute) work per microbatch and virtual
chunk, first kernel to last, with its busy, compute and communication
time. The page draws the work as blocks over the stage's shaded window, so
the bubble is what shows between them, and every figure it prints is one
of those columns. Times are sent relative to the group's start, on the
marts' own clock (the bubble mart measures the window on it).

What no mart has, and so is not shown: a bubble ratio of the whole group
for one iteration (``fct_iteration_summary.bubble_ratio`` sums over every
group of the iteration, ``fct_run_summary.bubble_ratio`` over the run).
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.reports.html import rank_label
from tracehouse.reports.style import PHASE_COLORS
from tracehouse.serve.cells import cell, iteration_label, plain, table
from tracehouse.serve.marts import Selection, rows, tables
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import WHOLE_TRACE, BadRequest, Params

#: The bubble's split, as ``(column, heading)`` of fct_pipeline_bubble_parts.
PART_COLUMNS = (("busy_ns", "busy"), ("bubble_ns", "bubble"), ("p2p_wait_ns", "P2P wait"),
                ("dp_wait_ns", "gradient-sync wait"),
                ("collective_wait_ns", "other collective wait"),
                ("other_kernel_ns", "other kernels"), ("idle_ns", "idle"))


def _group(cur: duckdb.DuckDBPyConnection, params: Params,
           ) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """The run, its (group, iteration) choices, the chosen group's stages
    (fct_pipeline_bubbles rows) and the bound values naming them."""
    run_id = requested_run(cur, params, "fct_pipeline_bubbles", "fct_microbatch_phases")
    choices = rows(cur, "select distinct pp_group_index, iteration from fct_pipeline_bubbles "
                        "where run_id = ? order by 1, 2 nulls first", [run_id])
    if not choices:
        raise BadRequest(f"run {run_id!r} has no pipeline groups (fct_pipeline_bubbles is "
                         "empty for it: no pipeline parallelism, or no stage information)")
    group = params.integer("group", choices[0]["pp_group_index"], low=0)
    iteration = params.iteration() if params.optional_text("iteration") else \
        choices[0]["iteration"]
    where = {"run": run_id, "group": group, "iteration": iteration}
    stages = rows(cur, """
        select * from fct_pipeline_bubbles
        where run_id = $run and pp_group_index = $group
            and iteration is not distinct from $iteration
        order by pp_stage
    """, where)
    if not stages:
        raise BadRequest(f"run {run_id!r} has no pipeline group {group} in iteration "
                         f"{iteration_label(iteration)}")
    return run_id, choices, stages, where


def pipeline_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """The group's stages' microbatch work (``fct_microbatch_phases`` rows with a microbatch)."""
    run_id, _choices, stages, where = _group(cur, params)
    return Selection(
        f"{run_id}-pp{where['group']}-iteration-{iteration_label(where['iteration'])}",
        "select * from fct_microbatch_phases where run_id = $run "
        "and iteration is not distinct from $iteration and list_contains($ranks, rank) "
        "and microbatch is not null and first_start_ns is not null",
        {"run": run_id, "iteration": where["iteration"],
         "ranks": [stage["rank"] for stage in stages]}, "rank, first_start_ns")


def pipeline(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """A pipeline group's stages, their bubbles and microbatch blocks in one iteration."""
    run_id, choices, stages, where = _group(cur, params)
    group, iteration = where["group"], where["iteration"]
    present = tables(cur)
    origin = int(stages[0]["group_start_ns"])
    coordinates = {row["rank"]: row for row in rows(
        cur, "select rank, pp_stage, tp_rank, dp_rank from fct_rank_iterations "
             "where run_id = ? and list_contains(?, rank)",
        [run_id, [stage["rank"] for stage in stages]])}
    parts = rows(cur, """
        select *, part_start_ns - $origin as start_at, part_end_ns - $origin as end_at
        from fct_pipeline_bubble_parts
        where run_id = $run and pp_group_index = $group
            and iteration is not distinct from $iteration
        order by pp_stage, part_order
    """, {**where, "origin": origin}) if "fct_pipeline_bubble_parts" in present else []
    return {
        "run_id": run_id,
        "group": group,
        "iteration": iteration_label(iteration),
        "iteration_key": WHOLE_TRACE if iteration is None else iteration,
        "choices": [{"group": row["pp_group_index"], "iteration": iteration_label(
            row["iteration"]), "key": WHOLE_TRACE if row["iteration"] is None
            else row["iteration"]} for row in choices],
        "span": plain(stages[0]["group_span_ns"]),
        "microbatches": plain(stages[0]["microbatches"]),
        "vpp_size": plain(stages[0]["vpp_size"]),
        "stages": [{
            "stage": stage["pp_stage"],
            "rank": stage["rank"],
            "label": f"stage {stage['pp_stage']} · "
                     f"{rank_label(coordinates.get(stage['rank'], stage))}",
            "start": plain(stage["stage_start_ns"] - origin),
            "end": plain(stage["stage_end_ns"] - origin),
        } for stage in stages],
        "bubbles": table([("pp_stage", "stage", "int"), ("rank", "rank", "int"),
                          ("busy_ns", "busy", "ms"), ("bubble_ns", "bubble", "ms"),
                          ("bubble_ratio", "bubble ratio", "pct"),
                          ("theoretical_bubble_ratio", "theoretical (p−1)/(v·m+p−1)", "pct"),
                          ("work_count", "work items", "int")], stages),
        "parts": table([("pp_stage", "stage", "int"), ("schedule_part", "part", "text"),
                        *((column, heading, "ms") for column, heading in PART_COLUMNS),
                        ("bubble_ratio", "bubble ratio", "pct")], parts),
        "schedule_parts": [{"stage": part["pp_stage"], "part": part["schedule_part"],
                            "start": plain(part["start_at"]), "end": plain(part["end_at"])}
                           for part in parts],
        "blocks": _blocks(cur, pipeline_selection(cur, params), stages, origin),
        "colors": dict(PHASE_COLORS),
    }


def _blocks(cur: duckdb.DuckDBPyConnection, selection: Selection,
            stages: list[dict[str, Any]], origin: int) -> list[dict[str, Any]]:
    """Each stage's microbatch work, on the group's axis."""
    stage_of = {stage["rank"]: stage["pp_stage"] for stage in stages}
    found = rows(cur, f"""
        select *, first_start_ns - $origin as start_at, last_end_ns - $origin as end_at
        from ({selection.sql}) order by {selection.order}
    """, {**selection.params, "origin": origin})  # noqa: S608 - fixed SQL text only
    return [{
        "stage": stage_of[block["rank"]],
        "rank": block["rank"],
        "phase": block["phase"],
        "microbatch": block["microbatch"],
        "chunk": block["vpp_chunk"],
        "start": plain(block["start_at"]),
        "end": plain(block["end_at"]),
        "figures": [[label, cell(block[column], kind)] for column, label, kind in (
            ("wall_ns", "wall", "ms"), ("busy_ns", "busy", "ms"),
            ("compute_ns", "compute", "ms"), ("communication_ns", "communication", "ms"),
            ("kernel_count", "kernels", "int"))],
    } for block in found]
