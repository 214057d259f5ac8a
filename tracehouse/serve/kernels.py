"""A rank's kernels in one iteration (``fct_kernels``): sortable, filterable, one page at a time.

Why pages: a rank of a large job runs tens of thousands of kernels per
iteration; the page asks for :data:`PAGE_ROWS` at a time, sorted and
filtered in SQL, and is told how many there are. The sort column comes
from the fixed :data:`SORTABLE` list and the name filter is a bound
substring match (a kernel name holds ``%``, ``_`` and quotes, so no LIKE
pattern is built from it).
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.serve.cells import table
from tracehouse.serve.marts import Selection, first_row, rows
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import Params

PAGE_ROWS = 100
#: Columns the table can be sorted by, each with a tie-breaker that keeps pages stable.
SORTABLE = ("ts_ns", "dur_ns", "name", "kind", "stream", "phase", "microbatch")

#: What the table shows, as ``(column, heading, kind)``.
SHOWN = (
    ("start_ns", "start in the step", "ms3"),
    ("dur_ns", "duration", "us"),
    ("name", "kernel", "text"),
    ("kind", "kind", "text"),
    ("phase", "phase", "text"),
    ("microbatch", "microbatch", "int"),
    ("vpp_chunk", "chunk", "int"),
    ("stream", "stream", "int"),
    ("comm_op", "collective", "text"),
    ("comm_group_kind", "group", "text"),
)


def kernel_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """A rank's kernels in one iteration, filtered (name, phase, microbatch, chunk) and sorted
    as the table asks: every column of ``fct_kernels``, every row (the table pages them)."""
    run_id = requested_run(cur, params, "fct_kernels")
    rank = params.integer("rank", low=0)
    iteration = params.iteration()
    sort = params.choice("sort", SORTABLE, "dur_ns")
    direction = "desc" if params.flag("desc") else "asc"
    where = "run_id = $run and rank = $rank and iteration is not distinct from $iteration"
    bound: dict[str, Any] = {"run": run_id, "rank": rank, "iteration": iteration}
    if params.optional_text("q"):
        where += " and contains(lower(name), lower($q))"
        bound["q"] = params.text("q")
    # A pipeline block's kernels: its phase, microbatch and virtual chunk.
    if params.optional_text("phase"):
        where += " and phase = $phase"
        bound["phase"] = params.text("phase")
    if params.optional_text("microbatch"):
        where += " and microbatch = $microbatch"
        bound["microbatch"] = params.integer("microbatch")
    if params.optional_text("chunk"):
        where += " and vpp_chunk = $chunk"
        bound["chunk"] = params.integer("chunk")
    # ``sort`` and ``direction`` come from fixed lists; every value is bound.
    return Selection(f"{run_id}-rank{rank}-kernels",
                     f"select * from fct_kernels where {where}", bound,  # noqa: S608
                     f"{sort} {direction} nulls last, ts_ns, slice_id")


def rank_kernels(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """One page of a rank's kernels in one iteration, sorted and filtered as asked."""
    selection = kernel_selection(cur, params)
    offset = params.integer("offset", 0, low=0)
    found = rows(cur, f"""
        with window_start as (
            select min(step_start_ns) as step_start_ns
            from fct_rank_iterations
            where run_id = $run and rank = $rank and iteration is not distinct from $iteration
        ),
        selected as ({selection.sql})
        select
            selected.*,
            selected.ts_ns - window_start.step_start_ns as start_ns,
            count(*) over () as total_rows
        from selected
        cross join window_start
        order by {selection.order}
        limit {PAGE_ROWS} offset $offset
    """, {**selection.params, "offset": offset})  # noqa: S608 - fixed SQL text only
    total = found[0]["total_rows"] if found else _count(cur, selection)
    return {"total": total, "offset": offset, "page_rows": PAGE_ROWS,
            "sort": params.choice("sort", SORTABLE, "dur_ns"), "desc": params.flag("desc"),
            "kernels": table(SHOWN, found, key=("trace_id", "slice_id"))}


def _count(cur: duckdb.DuckDBPyConnection, selection: Selection) -> int:
    """How many kernels match (a page past the end has no row to read it from)."""
    found = first_row(cur, f"select count(*) from ({selection.sql})",  # noqa: S608
                      selection.params)
    return int(found[0]) if found else 0
