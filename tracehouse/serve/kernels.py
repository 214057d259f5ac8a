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
from tracehouse.serve.marts import rows
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


def rank_kernels(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """One page of a rank's kernels in one iteration, sorted and filtered as asked."""
    run_id = requested_run(cur, params, "fct_kernels")
    rank = params.integer("rank", low=0)
    iteration = params.iteration()
    sort = params.choice("sort", SORTABLE, "dur_ns")
    descending = params.flag("desc")
    search = params.optional_text("q")
    offset = params.integer("offset", 0, low=0)
    where = "run_id = $run and rank = $rank and iteration is not distinct from $iteration"
    bound: dict[str, Any] = {"run": run_id, "rank": rank, "iteration": iteration}
    if search:
        where += " and contains(lower(name), lower($q))"
        bound["q"] = search
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
    direction = "desc" if descending else "asc"
    # ``sort`` and ``direction`` come from fixed lists; every value is bound.
    found = rows(cur, f"""
        with window_start as (
            select min(step_start_ns) as step_start_ns
            from fct_rank_iterations
            where run_id = $run and rank = $rank and iteration is not distinct from $iteration
        )
        select
            kernels.*,
            kernels.ts_ns - window_start.step_start_ns as start_ns,
            count(*) over () as total_rows
        from fct_kernels as kernels
        cross join window_start
        where {where}
        order by {sort} {direction} nulls last, ts_ns, slice_id
        limit {PAGE_ROWS} offset $offset
    """, {**bound, "offset": offset})  # noqa: S608
    total = found[0]["total_rows"] if found else _count(cur, where, bound)
    return {"total": total, "offset": offset, "page_rows": PAGE_ROWS, "sort": sort,
            "desc": descending,
            "kernels": table(SHOWN, found, key=("trace_id", "slice_id"))}


def _count(cur: duckdb.DuckDBPyConnection, where: str, bound: dict[str, Any]) -> int:
    """How many kernels match (a page past the end has no row to read it from)."""
    found = cur.execute(f"select count(*) from fct_kernels where {where}",  # noqa: S608
                        bound).fetchone()
    return int(found[0]) if found else 0
