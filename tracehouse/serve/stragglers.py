"""Who waited for whom: an iteration's stragglers and its collectives, worst first.

Why these two tables side by side: ``fct_stragglers`` ranks an iteration's
ranks by the waiting their late arrivals caused (``straggler_rank`` 1 is
"the straggler" everywhere), and ``fct_collectives`` names each collective
instance's start skew, the rank that arrived last and the waiting it
caused. Read together they answer "who held the others back, in which
collectives, by how long"; each collective opens its members on the
timeline, around its window (reference clock, as both marts are). The
collectives table is sorted and filtered in SQL, one page at a time, as the
kernels table is.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.serve.cells import iteration_label, table
from tracehouse.serve.marts import Selection, rows
from tracehouse.serve.overview import iteration_rows, requested_run
from tracehouse.serve.params import Params
from tracehouse.serve.timeline import run_origin

PAGE_ROWS = 100
#: Columns the collectives can be sorted by (largest first).
SORTABLE = ("start_skew_ns", "last_rank_wait_caused_ns", "total_wait_ns", "transfer_ns",
            "bytes", "first_start_ns")


def straggler_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """An iteration's ``fct_stragglers`` rows, the straggler first."""
    return iteration_rows(cur, params, "fct_stragglers", "stragglers",
                          "straggler_rank nulls last, rank")


def collective_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """An iteration's ``fct_collectives`` rows, filtered by op or group and sorted as asked
    (largest first), each with its members' ranks."""
    run_id = requested_run(cur, params, "fct_collectives", "fct_collective_ranks")
    iteration = params.iteration()
    sort = params.choice("sort", SORTABLE, "start_skew_ns")
    bound: dict[str, Any] = {"run": run_id, "iteration": iteration}
    which = ""
    if params.optional_text("q"):
        which = (" and (contains(lower(collectives.op), lower($q)) or "
                 "contains(lower(collectives.process_group_key), lower($q)))")
        bound["q"] = params.text("q")
    # ``sort`` is from a fixed list; every value is bound.
    return Selection(f"{run_id}-collectives-{iteration_label(iteration)}", f"""
        select collectives.*, members.ranks
        from fct_collectives as collectives
        left join (
            select collective_id, list(rank order by rank) as ranks
            from fct_collective_ranks
            where run_id = $run and iteration is not distinct from $iteration
            group by collective_id
        ) as members on collectives.collective_id = members.collective_id
        where collectives.run_id = $run
            and collectives.iteration is not distinct from $iteration{which}
    """, bound, f"{sort} desc nulls last, collective_id")  # noqa: S608


def stragglers(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The iteration's stragglers, and one page of its collectives with timeline windows."""
    waiting = straggler_selection(cur, params)
    collectives = collective_selection(cur, params)
    run_id = waiting.params["run"]
    offset = params.integer("offset", 0, low=0)
    origin = run_origin(cur, run_id)
    found = rows(cur, f"""
        select *, count(*) over () as total_rows from ({collectives.sql})
        order by {collectives.order}
        limit {PAGE_ROWS} offset $offset
    """, {**collectives.params, "offset": offset})  # noqa: S608 - fixed SQL text only
    for row in found:
        row["members"] = ", ".join(str(rank) for rank in row["ranks"] or [])
        pad = max(int(row["last_end_ns"] - row["first_start_ns"]) // 4, 1_000)
        row["window"] = [int(row["first_start_ns"]) - origin - pad,
                         int(row["last_end_ns"]) - origin + pad]
    shown = table([
        ("op", "collective", "text"), ("process_group_key", "group", "text"),
        ("seq", "seq", "int"), ("members", "ranks", "text"), ("bytes", "bytes", "int"),
        ("start_skew_ns", "start skew", "ms"), ("last_rank", "last to arrive", "int"),
        ("last_rank_wait_caused_ns", "waiting it caused", "ms"),
        ("total_wait_ns", "all waiting", "ms"), ("transfer_ns", "transfer", "ms"),
        ("busbw_gbps", "bus GB/s", "x1"),
    ], found, key=("collective_id", "ranks", "window"))
    return {
        "run_id": run_id,
        "iteration": iteration_label(waiting.params["iteration"]),
        "stragglers": table([
            ("straggler_rank", "straggler rank", "int"), ("rank", "rank", "int"),
            ("pp_stage", "stage", "int"), ("wait_caused_ns", "waiting it caused", "ms"),
            ("times_last", "times last", "int"), ("wait_ns", "its own waiting", "ms"),
            ("compute_ns", "compute", "ms"),
            ("compute_vs_stage_median", "compute vs its stage's median", "times"),
        ], rows(cur, waiting.ordered, waiting.params), key=("rank",)),
        "collectives": shown,
        "total": found[0]["total_rows"] if found else 0,
        "offset": offset,
        "page_rows": PAGE_ROWS,
    }
