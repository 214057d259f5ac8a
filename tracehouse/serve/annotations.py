"""The annotation tree of a rank (``fct_annotation_ranges``): expand level by level, or search.

Why one level per request: a rank of an Nsight capture holds tens of
thousands of NVTX ranges; the page asks for the top level, then a node's
children when it is opened (as nsys-ai's tree TUI does), each answer at most
:data:`MAX_NODES` ranges. A search returns the ranges whose name holds the
text (a bound substring match, not a LIKE pattern), each with its path, so
a hit deep in the tree is found without opening every level.

Each range names its thread: a rank's top level holds one tree per thread
(the ProfilerSteps on the main thread, the NCCL ranges autograd's thread
records on another), and the page groups it by thread.

Each range shows its CPU span, its GPU projection (the kernels launched in
it or below, first start to last end) and its kernel counts, as the mart
has them, and a window for the timeline: the GPU projection when it has
kernels, else the CPU span, on the run's reference clock.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.serve.cells import cell
from tracehouse.serve.marts import Selection, first_row, rows, tables
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import BadRequest, Params
from tracehouse.serve.timeline import run_origin

#: Ranges per answer (a level of the tree, or search hits).
MAX_NODES = 500


def annotation_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """One level of a rank's tree (the top, or a range's children) or the search hits: their
    ``fct_annotation_ranges`` rows, with their child count and timeline window."""
    run_id = requested_run(cur, params, "fct_annotation_ranges")
    present = tables(cur)
    rank = params.integer("rank", low=0)
    bound: dict[str, Any] = {"run": run_id, "rank": rank}
    if params.optional_text("q"):
        which = "contains(lower(ranges.name), lower($q))"
        bound["q"] = params.text("q")
    elif params.optional_text("trace"):
        which = "ranges.trace_id = $trace and ranges.parent_range_id = $parent"
        bound["trace"] = params.text("trace")
        bound["parent"] = params.integer("slice")
    else:
        which = "ranges.parent_range_id is null"
    offset = first_row(
        cur, "select offset_ns from dim_rank_clock_offsets where run_id = ? and rank = ?",
        [run_id, rank]) if "dim_rank_clock_offsets" in present else None
    try:
        origin: int | None = run_origin(cur, run_id)
    except BadRequest:  # a run without steps: no timeline to open
        origin = None
    bound["shift"] = (int(offset[0] or 0) if offset else 0) - (origin or 0)
    bound["has_timeline"] = origin is not None
    # ``which`` is one of three fixed conditions; every value is bound.
    return Selection(f"{run_id}-rank{rank}-annotations", f"""
        with children as (
            select trace_id, parent_range_id, count(*) as children
            from fct_annotation_ranges
            where run_id = $run and rank = $rank and parent_range_id is not null
            group by 1, 2
        )
        select
            ranges.*,
            coalesce(children.children, 0) as children,
            case when $has_timeline
                then coalesce(ranges.gpu_start_ns, ranges.ts_ns) + $shift end
                as window_start,
            case when $has_timeline
                then coalesce(ranges.gpu_end_ns, ranges.end_ns) + $shift end
                as window_end
        from fct_annotation_ranges as ranges
        left join children
            on ranges.trace_id = children.trace_id
            and ranges.slice_id = children.parent_range_id
        where ranges.run_id = $run and ranges.rank = $rank and {which}
    """, bound, "ts_ns, slice_id")  # noqa: S608


def annotation_tree(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """One level of a rank's annotation tree (the top, or a range's children), or search hits."""
    selection = annotation_selection(cur, params)
    found = rows(cur, f"{selection.ordered} limit $limit",
                 {**selection.params, "limit": MAX_NODES + 1})
    return {
        "run_id": selection.params["run"],
        "rank": selection.params["rank"],
        "search": selection.params.get("q"),
        "left_out": len(found) > MAX_NODES,
        "nodes": [{
            "key": {"trace": node["trace_id"], "slice": node["slice_id"]},
            "name": node["name"],
            "thread": _thread_label(node),
            "kind": node["annotation_kind"],
            "depth": node["annotation_depth"],
            "path": node["annotation_path"],
            "children": node["children"],
            "figures": [["CPU", cell(node["dur_ns"], "ms")],
                        ["GPU projection", cell(node["gpu_span_ns"], "ms")],
                        ["kernels", cell(node["kernel_count"], "int")],
                        ["own kernels", cell(node["own_kernel_count"], "int")]],
            "window": None if node["window_start"] is None
            else [int(node["window_start"]), max(int(node["window_end"]),
                                                 int(node["window_start"]) + 1)],
        } for node in found[:MAX_NODES]],
    }


def _thread_label(node: dict[str, Any]) -> str:
    """The range's thread as the trace names it (``thread 7 (pt_main_thread)``), else its id,
    else its track in the trace (a warehouse built before the mart had threads)."""
    if node.get("thread_name"):
        return str(node["thread_name"])
    if node.get("tid") is not None:
        return f"thread {node['tid']}"
    return f"track {node['track_id']}"
