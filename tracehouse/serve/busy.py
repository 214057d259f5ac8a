"""The timeline zoomed out over many ranks: how busy each rank was, per screen cell, from
``fct_rank_busy_buckets``.

Why a mart of busy buckets and not the kernels: a view of all 1,024 ranks
over an iteration covers 2 M kernels, and picking each pixel's longest one
took 0.7-3 s however the kernels were stored (the aggregate itself, not
the read). The mart holds each rank's busy time per fixed bucket of
``bucket_ns`` (a few hundred per iteration), so the same view sums a few
hundred thousand rows. It answers only where a screen cell holds at least
one bucket (``step >= bucket_ns``), i.e. where kernels could not be told
apart anyway; zoomed in further the timeline draws kernels again.

What is drawn: the buckets of a rank whose middle falls in a cell, as one
rectangle from the first one's start to the last one's end (at their true
places on the reference clock, so nothing is moved to a grid), with the
busy time it holds in all and per kind; its colour is the kind with the
most busy time, its depth the busy share. The busy figures are the
mart's, so they add up to fct_rank_iterations' busy columns.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.serve.marts import bound, first_row, tables

#: The mart this module reads.
BUCKETS_MART = "fct_rank_busy_buckets"
#: The busy columns, per kind, in the order the answer lists them.
KINDS = ("compute", "communication", "memory")


def bucket_width(cur: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """The run's bucket width (ns) in :data:`BUCKETS_MART`; None without the mart or rows."""
    if BUCKETS_MART not in tables(cur):
        return None
    found = first_row(cur, f"select any_value(bucket_ns) from {BUCKETS_MART} "  # noqa: S608
                           "where run_id = ?", [run_id])
    return int(found[0]) if found and found[0] is not None else None


#: The shown ranks and their clock offsets (``$shifts``: [rank, offset_ns] pairs), the CTE
#: every timeline query starts from.
SHIFTS = """
    shifts as (
        select pair[1] as rank, pair[2] as shift_ns from (select unnest($shifts) as pair)
    )
"""

#: The shown ranks' buckets overlapping the window, on the view's axis, summed per cell
#: (a bucket belongs to the cell of its middle; the constant ``raw_*`` bounds let DuckDB
#: skip row groups, the mart being ordered by bucket start).
_CELLS = f"""
    with {SHIFTS},
    buckets as (
        select
            buckets.rank,
            buckets.bucket_start_ns + shifts.shift_ns - $origin as ts,
            buckets.bucket_ns as dur,
            buckets.busy_ns,
            buckets.compute_ns,
            buckets.communication_ns,
            buckets.memory_ns
        from {BUCKETS_MART} as buckets
        inner join shifts on buckets.rank = shifts.rank
        where buckets.run_id = $run
            and buckets.rank between $low and $high
            and buckets.bucket_start_ns < $raw_end
            and buckets.bucket_start_ns + buckets.bucket_ns > $raw_start
            and buckets.bucket_start_ns + shifts.shift_ns - $origin < $end
            and buckets.bucket_start_ns + buckets.bucket_ns + shifts.shift_ns - $origin > $start
    ),
    cells as (
        select
            rank,
            min(ts) as ts,
            max(ts + dur) - min(ts) as dur,
            sum(busy_ns)::bigint as busy,
            sum(compute_ns)::bigint as compute,
            sum(communication_ns)::bigint as communication,
            sum(memory_ns)::bigint as memory
        from buckets
        group by rank, (greatest(ts + dur // 2, $start) - $start) // $step
    )
    select
        rank, ts, dur, busy, compute, communication, memory,
        -- the kind with the most busy time, the first of equals in KINDS' order
        case
            when compute >= communication and compute >= memory then 0
            when communication >= memory then 1
            else 2
        end as kind
    from cells
    order by rank, ts
"""  # noqa: S608 - fixed SQL text only


def busy_cells(cur: duckdb.DuckDBPyConnection, window: dict[str, Any], step: int,
               lane_index: dict[int, int]) -> dict[str, Any]:
    """The window's cells (``step`` ns wide) of every shown rank, as columns: lane, start and
    length on the view's axis, busy ns in all and per kind, and the kind with the most.

    Read column by column (NumPy): 60,000 cells as Python tuples took 200 ms of a 240 ms
    answer at 1,024 ranks, the query itself 36 ms."""
    found = cur.execute(_CELLS, bound(_CELLS, {**window, "step": step})).fetchnumpy()
    columns = {key: found[key].tolist() for key in ("ts", "dur", "busy", *KINDS, "kind")}
    return {"rects": {"lane": [lane_index[rank] for rank in found["rank"].tolist()], **columns},
            "kind_names": list(KINDS)}
