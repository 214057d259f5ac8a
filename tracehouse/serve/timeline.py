"""The timeline: any set of ranks over any window, kernels by stream, collectives linked to peers.

Why the level of detail is computed in SQL: a window of a large run holds
millions of kernels, and no browser draws (nor any server sends) that many
rectangles per interaction. As Perfetto's mipmap does (research §5.5), the
window is cut into ``buckets`` per lane (one per pixel, fewer when many
lanes share the screen: at most :data:`MAX_CELLS` lane × bucket cells per
answer), and each bucket returns only its longest kernel, drawn at its true
start and length, with how many kernels it stands for. Zoomed in far enough,
every bucket holds one kernel: the answer is then the exact kernels
(``exact``), each with its key for the kernel view. So an answer never
grows with the number of kernels, only with the screen.

Clock alignment: kernels are on their rank's clock; each rank's
``dim_rank_clock_offsets.offset_ns`` (0 without a row) puts them on the
run's reference clock, as ``fct_collective_ranks`` (arrivals) and
``fct_rank_iterations.aligned_step_start_ns`` already are. Times travel in
nanoseconds relative to the run's ``origin_ns`` (its first aligned step
start), so a double holds them exactly.

Lanes: one per rank and stream; above :data:`MAX_STREAM_RANKS` ranks the
streams of a rank share one lane (a 1,024-rank view is one row per rank).
Collectives (:mod:`.links`): each collective instance with at least two of
the shown ranks inside the window is a chain of its members in arrival
order (the last to arrive is the one everybody waited for), up to
:data:`.links.MAX_LINKS` chains; beyond that the answer says to zoom in.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from tracehouse.reports.html import rank_label
from tracehouse.reports.style import KIND_COLORS, PHASE_COLORS
from tracehouse.serve.busy import SHIFTS, bucket_width, busy_cells
from tracehouse.serve.cells import iteration_label, plain
from tracehouse.serve.links import links, members_in_window, members_mart, members_of_kernels
from tracehouse.serve.marts import Selection, bound, first_row, rows, tables
from tracehouse.serve.overview import requested_run
from tracehouse.serve.params import WHOLE_TRACE, BadRequest, Params
from tracehouse.serve.pixels import TEXT_COLUMNS, HashCollision, longest_per_cell

#: Lane × bucket cells one answer may hold (bounds its size and its query).
MAX_CELLS = 60_000
#: Above this many ranks, a rank's streams share one lane.
MAX_STREAM_RANKS = 64
#: Ranks one view may show.
MAX_RANKS = 4096
#: Selections of at most this many ranks are cached (:func:`_cached`), this many at a time.
CACHE_MAX_RANKS = 64
CACHE_ENTRIES = 8
_CACHE_LOCK = threading.Lock()
#: The lane of a rank's CPU step frames (in place of a stream number).
CPU_LANE = "cpu"
#: Group selectors: the page's name → dim_ranks' column.
GROUPS = {"pp": "pp_group_index", "tp": "tp_group_index", "dp": "dp_group_index",
          "cp": "cp_group_index", "replica": "model_replica"}


def timeline_choices(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """What the timeline can show for a run: its ranks, groups and iterations (with windows)."""
    run_id = requested_run(cur, params)
    present = tables(cur)
    groups: dict[str, list[int]] = {}
    if "dim_ranks" in present:
        for kind, column in GROUPS.items():
            # ``column`` is one of GROUPS' fixed names.
            found = cur.execute(f"select {column} from dim_ranks "  # noqa: S608
                                f"where run_id = ? and {column} is not null group by 1 "
                                "having count(*) > 1 order by 1", [run_id]).fetchall()
            if found:
                groups[kind] = [row[0] for row in found]
    origin = run_origin(cur, run_id)
    ranks = [row[0] for row in cur.execute(
        "select distinct rank from fct_rank_iterations where run_id = ? order by rank",
        [run_id]).fetchall()]
    return {
        "run_id": run_id,
        "origin_ns": str(origin),
        "ranks": ranks,
        "groups": groups,
        "iterations": iteration_windows(cur, run_id, origin),
    }


def iteration_windows(cur: duckdb.DuckDBPyConnection, run_id: str,
                      origin: int | None = None) -> list[dict[str, Any]]:
    """Each iteration's window on the timeline's axis (ns after the run's origin): its first
    rank's aligned step start to its last rank's step end; what a link to an iteration on
    the timeline opens."""
    origin = run_origin(cur, run_id) if origin is None else origin
    iterations = rows(cur, """
        select iteration,
               min(aligned_step_start_ns) - $origin as start_ns,
               max(aligned_step_start_ns + step_ns) - $origin as end_ns
        from fct_rank_iterations
        where run_id = $run and step_ns is not null
        group by iteration order by iteration nulls first
    """, {"run": run_id, "origin": origin})
    return [{"label": iteration_label(row["iteration"]),
             "key": WHOLE_TRACE if row["iteration"] is None else row["iteration"],
             "start": plain(row["start_ns"]), "end": plain(row["end_ns"])}
            for row in iterations]


def run_origin(cur: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """The run's first aligned step start (absolute ns), the zero of every time sent."""
    found = first_row(cur, "select min(aligned_step_start_ns) from fct_rank_iterations "
                           "where run_id = ?", [run_id])
    if not found or found[0] is None:
        raise BadRequest(f"run {run_id!r} has no steps to put on a timeline")
    return int(found[0])


def selected_ranks(cur: duckdb.DuckDBPyConnection, run_id: str, params: Params) -> list[int]:
    """The ranks asked for: ``group=pp&index=N`` (dim_ranks) or ``ranks=0,4-7``."""
    group = params.optional_text("group")
    if group is None:
        return params.ranks(limit=MAX_RANKS)
    column = GROUPS.get(group)
    if column is None:
        raise BadRequest(f"parameter 'group' must be one of {', '.join(GROUPS)}, not {group!r}")
    index = params.integer("index", low=0)
    found = [row[0] for row in cur.execute(
        f"select rank from dim_ranks where run_id = ? and {column} = ? "  # noqa: S608
        "order by rank", [run_id, index]).fetchall()]
    if not found:
        raise BadRequest(f"run {run_id!r} has no {group} group {index}")
    return found


def view_window(cur: duckdb.DuckDBPyConnection,
                params: Params) -> tuple[str, list[int], dict[str, Any]]:
    """The run, the ranks and the bound values of :data:`_KERNELS_IN_WINDOW` for a request's
    ranks and ``[start, end)`` (ns after the run's origin)."""
    run_id = requested_run(cur, params, "fct_kernels")
    ranks = selected_ranks(cur, run_id, params)
    origin = run_origin(cur, run_id)
    start, end = params.integer("start"), params.integer("end")
    if end <= start:
        raise BadRequest("parameter 'end' must be after 'start'")
    offsets = dict(cur.execute(
        "select rank, offset_ns from dim_rank_clock_offsets where run_id = ? "
        "and list_contains(?, rank)", [run_id, ranks]).fetchall()) \
        if "dim_rank_clock_offsets" in tables(cur) else {}
    shifts = {rank: int(offsets.get(rank) or 0) for rank in ranks}
    return run_id, ranks, {
        "run": run_id, "low": min(ranks), "high": max(ranks),
        "origin": origin, "start": start, "end": end,
        # The window on the ranks' own clocks, widened by the extreme offsets: constants
        # DuckDB prunes row groups with; each rank's exact window is applied after.
        "raw_start": origin + start - max(shifts.values()),
        "raw_end": origin + end - min(shifts.values()),
        # The window on the reference clock (collective members are there already).
        "aligned_start": origin + start, "aligned_end": origin + end,
        "shifts": [[rank, shift] for rank, shift in shifts.items()],
    }


def timeline_selection(cur: duckdb.DuckDBPyConnection, params: Params) -> Selection:
    """Every kernel of the view, whole (all of ``fct_kernels``' columns), with its start on the
    view's axis: what the timeline draws, at full detail."""
    run_id, ranks, window = view_window(cur, params)
    columns = "kernels.*, kernels.ts_ns + shifts.shift_ns - $origin as start_in_view_ns"
    sql = (f"with {_KERNELS_IN_WINDOW.format(columns=columns, table='fct_kernels')} "
           "select * from kernels")
    return Selection(f"{run_id}-timeline", sql, bound(sql, window),
                     "rank, stream, ts_ns, slice_id")


def timeline(cur: duckdb.DuckDBPyConnection, params: Params) -> dict[str, Any]:
    """The kernels of the chosen ranks in ``[start, end)`` (ns after the run's origin), at the
    level of detail of ``px`` pixels, and the collectives linking them; zoomed out over more
    than :data:`MAX_STREAM_RANKS` ranks, their busy time per cell (:mod:`.busy`) instead."""
    run_id, ranks, window = view_window(cur, params)
    start, end = window["start"], window["end"]
    px = params.integer("px", 1200, low=50, high=8000)
    by_stream = len(ranks) <= MAX_STREAM_RANKS
    if not by_stream:
        # One lane per rank: the cells are known before any kernel is read.
        buckets, step = _grid(start, end, px, len(ranks))
        width = bucket_width(cur, run_id)
        if width is not None and step >= width:
            lanes = [(rank, None) for rank in ranks]
            return {**_head(cur, run_id, ranks, window, lanes, buckets, step, by_stream),
                    "mode": "busy", "exact": False,
                    **busy_cells(cur, window, step, {rank: lane for lane, rank in
                                                     enumerate(ranks)}),
                    **_links(cur, _Source(SHIFTS, _members(cur, by_stream), window),
                             {lane: index for index, lane in enumerate(lanes)})}
    source = _source(cur, run_id, ranks, window, by_stream)
    lanes = _lanes(cur, source, ranks, by_stream)
    buckets, step = _grid(start, end, px, len(lanes))
    found = _kernel_cells(cur, source, lanes, start, step, buckets)
    # A rank's CPU steps get a lane beside its streams; where a rank is one lane, none.
    frames = _cpu_frames(cur, window, step, source.table) if by_stream else {}
    shown = _with_cpu_lanes(lanes, frames.get("rank", []), by_stream)
    lane_index = {lane: index for index, lane in enumerate(shown)}
    # The kernels' lanes were numbered before the CPU lanes came in between (and an empty
    # lane of a rank with CPU steps went: no kernel is on it).
    found["lane"] = np.array([lane_index.get(lane, -1) for lane in lanes],
                             dtype=np.int64)[found["lane"]]
    return {
        **_head(cur, run_id, ranks, window, shown, buckets, step, by_stream),
        "mode": "kernels",
        **_rectangles([found, _as_cells(frames, lane_index)]),
        **_links(cur, source, lane_index),
    }


def _kernel_cells(cur: duckdb.DuckDBPyConnection, source: _Source,
                  lanes: list[tuple[int, Any]], start: int, step: int,
                  buckets: int) -> dict[str, Any]:
    """Each cell's longest kernel (:func:`.pixels.longest_per_cell`); in SQL, as
    :func:`_cpu_frames` picks frames, in the one-in-10^11 case of two strings of the window
    with one hash."""
    try:
        return longest_per_cell(cur, source.kernels, source.params, lanes, start, step,
                                buckets)
    except HashCollision:
        sql = f"""
            with {source.kernels}
            select
                rank, stream, count(*) as kernels,
                arg_max(ts, {_LONGEST}) as ts, max(dur) as dur,
                arg_max(kind, {_LONGEST}) as kind, arg_max(name, {_LONGEST}) as name,
                arg_max(trace_id, {_LONGEST}) as trace_id,
                arg_max(slice_id, {_LONGEST}) as slice_id
            from kernels
            group by rank, stream, (greatest(ts, $start) - $start) // $step
            order by rank, stream, ts
        """  # noqa: S608 - fixed SQL text only
        return _as_cells(_columns(cur, sql, bound(sql, {**source.params, "step": step})),
                         {lane: index for index, lane in enumerate(lanes)})


def _grid(start: int, end: int, px: int, lanes: int) -> tuple[int, int]:
    """Cells per lane and their width (ns) for ``lanes`` lanes over ``[start, end)``: one per
    pixel, fewer when the lanes would pass :data:`MAX_CELLS` cells."""
    buckets = max(1, min(px, MAX_CELLS // lanes))
    return buckets, max(1, -(-(end - start) // buckets))  # ceil: the cells cover the window


def _head(cur: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
          window: dict[str, Any], lanes: list[tuple[int, Any]], buckets: int, step: int,
          by_stream: bool) -> dict[str, Any]:
    """What every timeline answer says besides its rectangles: the window, grid and lanes."""
    labels = _rank_labels(cur, run_id, ranks)
    return {
        "run_id": run_id,
        "origin_ns": str(window["origin"]),
        "start": window["start"], "end": window["end"], "step": step, "buckets": buckets,
        "by_stream": by_stream,
        "lanes": [{"rank": rank, "stream": lane_stream,
                   "label": labels[rank] + {None: "", CPU_LANE: " · CPU steps"}.get(
                       lane_stream, f" · stream {lane_stream}")}
                  for rank, lane_stream in lanes],
        "colors": {**KIND_COLORS, **PHASE_COLORS},
    }


#: A bucket's kernel: the longest, of equally long ones the first (then the lowest slice id),
#: so that the same window always draws the same kernels. One 128-bit key: a list key
#: ([dur, -ts, -slice_id]) took 3.5x as long over 2 M kernels (2.1 s against 0.6 s).
_LONGEST = "((dur::hugeint << 64) - (ts::hugeint << 24) - slice_id)"

#: The shown ranks' kernels overlapping the window, ``{columns}`` of them from ``{table}``
#: (fixed text).
_KERNELS_IN_WINDOW = SHIFTS + """,
    kernels as (
        select {columns}
        from {table} as kernels
        inner join shifts on kernels.rank = shifts.rank
        where kernels.run_id = $run
            and kernels.rank between $low and $high
            and kernels.ts_ns < $raw_end and kernels.end_ns > $raw_start
            and kernels.ts_ns + shifts.shift_ns - $origin < $end
            and kernels.end_ns + shifts.shift_ns - $origin > $start
    )
"""


def _kernels_mart(cur: duckdb.DuckDBPyConnection) -> str:
    """Where the timeline reads kernels: ``fct_kernel_timeline`` (the same rows as
    ``fct_kernels``, ordered so that a window skips most row groups), or ``fct_kernels`` in a
    warehouse built before that mart."""
    return "fct_kernel_timeline" if "fct_kernel_timeline" in tables(cur) else "fct_kernels"


@dataclass(frozen=True)
class _Source:
    """Where a view's kernels and collective members come from: two CTEs (``kernels``,
    ``members``) and the values they bind."""

    kernels: str
    members: str
    params: dict[str, Any]
    #: The selection's cache (:func:`_cached`), when it has one.
    table: str | None = None


def _source(cur: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
            window: dict[str, Any], by_stream: bool) -> _Source:
    """The window's kernels and members: from the selection's cache when it has one (see
    :func:`_cached`), else straight from the marts."""
    stream = "stream" if by_stream else "null::bigint as stream"
    table = _cached(cur, run_id, ranks, window)
    if table is None:
        return _Source(_KERNELS_IN_WINDOW.format(columns=_drawn(by_stream),
                                                 table=_kernels_mart(cur)),
                       _members(cur, by_stream), window)
    # By stream, the members on a kernel's stream; a lane per rank, its CPU calls too.
    on_streams = "and stream is not null" if by_stream else ""
    return _Source(
        f"""kernels as (
            select rank, {stream}, ts, dur, kind, name, trace_id, slice_id
            from {table} where ts < $end and ts + dur > $start
        )""",
        f"""members as (
            select collective_id, op, process_group_key, rank, {stream}, arrival, ended,
                arrival_order, is_last, wait_ns
            from {table}_members where arrival < $end and ended > $start {on_streams}
        )""", window, table)


def _members(cur: duckdb.DuckDBPyConnection, by_stream: bool) -> str:
    """The ``members`` CTE read straight from the mart: on the shown kernels' streams (needs
    the ``kernels`` CTE), or, a lane per rank, every call of the shown ranks in the window.
    """
    mart = members_mart(cur)
    return members_of_kernels(mart) if by_stream else members_in_window(mart)


def _links(cur: duckdb.DuckDBPyConnection, source: _Source,
           lane_index: dict[tuple[int, Any], int]) -> dict[str, Any]:
    """The collective chains among the view's members (:func:`.links.links`)."""
    return links(cur, source.kernels, source.members, source.params, lane_index)


def _cached(cur: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
            window: dict[str, Any]) -> str | None:
    """An in-memory table of the selection's kernels on the view's axis (and one of their
    collective members) covering at least the view's window; None above
    :data:`CACHE_MAX_RANKS` ranks.

    Why: a pan or a zoom is a new window, and even on ``fct_kernel_timeline``
    (stored by iteration and rank) each window filters the row groups of its
    ranks again, with their clock offsets joined in. The viewer keeps what it
    read of a selection, on the view's axis, in its own in-memory database
    (never the warehouse, which is attached read-only), and later windows
    read that. In no order: sorting them by time was most of a first view's
    cost, and a window's filter over an in-memory table of that size costs a
    few ms either way.

    Filled lazily, by window: the table covers ``[covered_start,
    covered_end)`` on the view's axis (every kernel and member overlapping it,
    no other); a window outside that reads only what the hull of both adds
    (the kernels and members overlapping the hull but not the old cover).
    Until 2026-11-27 the first view read the selection's every iteration:
    119-190 CPU ms for a 32-rank replica at 1,024 ranks x 4 iterations, where
    its one iteration needs a quarter of them (benchmarks/README.md).

    It lives as long as the connection to this published database (a new
    build gets a new one, without the caches); :data:`CACHE_ENTRIES`
    selections are kept, the least recently used one is dropped first.
    """
    if len(ranks) > CACHE_MAX_RANKS:
        return None
    key = hashlib.sha1(json.dumps([run_id, ranks]).encode()).hexdigest()[:16]
    table = f"memory.main.timeline_{key}"
    with _CACHE_LOCK:
        cur.execute("create table if not exists memory.main.timeline_cache_use "
                    "(name varchar primary key, used_at double, covered_start bigint, "
                    "covered_end bigint)")
        cover = first_row(cur, "select covered_start, covered_end from "
                               "memory.main.timeline_cache_use where name = ?", [table])
        start, end = window["start"], window["end"]
        if cover is None or not (cover[0] <= start and end <= cover[1]):
            hull = (start, end) if cover is None else (min(cover[0], start), max(cover[1], end))
            _fill(cur, table, window, hull, cover)
            cover = hull
        cur.execute("insert or replace into memory.main.timeline_cache_use values (?, ?, ?, ?)",
                    [table, time.monotonic(), *cover])
        for (old,) in cur.execute("select name from memory.main.timeline_cache_use "
                                  "order by used_at desc offset ?",
                                  [CACHE_ENTRIES]).fetchall():
            cur.execute(f"drop table if exists {old}")  # names made here, of hex digits
            cur.execute(f"drop table if exists {old}_members")
            cur.execute(f"drop table if exists {old}_frames")
            cur.execute("delete from memory.main.timeline_cache_use where name = ?", [old])
    return table


def _fill(cur: duckdb.DuckDBPyConnection, table: str, window: dict[str, Any],
          hull: tuple[int, int], cover: tuple[int, int] | None) -> None:
    """Make ``table`` (and ``<table>_members``, ``<table>_frames``) hold every kernel, member
    and CPU step frame of the window's ranks overlapping ``hull`` (view axis): create them,
    or add what overlaps ``hull`` but not the old ``cover``. A kernel's end is ``ts + dur``
    as the cache reads it (the marts' ``end_ns`` is ``ts_ns + dur_ns``); a member's are its
    arrival and end (the reference clock: a GPU call's are its kernel's, so its kernel is in
    the table); a frame's, its start and ``ended``."""
    low, high = hull
    bounds = {**window, "start": low, "end": high,
              # the raw bounds widened as the window's are (view_window)
              "raw_start": window["raw_start"] + low - window["start"],
              "raw_end": window["raw_end"] + high - window["end"],
              "aligned_start": window["origin"] + low, "aligned_end": window["origin"] + high,
              "old_start": cover[0] if cover else 0, "old_end": cover[1] if cover else 0}
    new_kernels, new_members = ("not (ts < $old_end and ts + dur > $old_start)",
                                "not (arrival < $old_end and ended > $old_start)") \
        if cover else ("true", "true")
    kernels = _KERNELS_IN_WINDOW.format(columns=_CACHED_COLUMNS, table=_kernels_mart(cur))
    sql = (f"{'insert into' if cover else 'create table'} {table} "
           f"{'' if cover else 'as '}with {kernels} select * from kernels where {new_kernels}")
    cur.execute(sql, bound(sql, bounds))  # fixed text and a name made of hex digits
    members = members_of_kernels(members_mart(cur), cpu_calls=True, within=True)
    sql = (f"{'insert into' if cover else 'create table'} {table}_members "
           f"{'' if cover else 'as '}with {SHIFTS}, kernels as (select * from {table}), "
           f"{members} select * from members where {new_members}")
    cur.execute(sql, bound(sql, bounds))  # fixed text and a name made of hex digits
    if "fct_cpu_steps" in tables(cur):
        sql = (f"{'insert into' if cover else 'create table'} {table}_frames "
               f"{'' if cover else 'as '}with {_FRAMES_IN_WINDOW} "
               f"select * from frames where {new_members.replace('arrival', 'ts')}")
        cur.execute(sql, bound(sql, bounds))  # fixed text and a name made of hex digits


#: What the cache keeps of each kernel (the timeline's axis; every stream).
_CACHED_COLUMNS = ("kernels.rank, kernels.stream, kernels.ts_ns + shifts.shift_ns - $origin as ts, "
                   "kernels.dur_ns as dur, kernels.kind, kernels.name, kernels.trace_id, "
                   "kernels.slice_id")


def _drawn(by_stream: bool) -> str:
    """What the timeline draws of each kernel, on the reference clock relative to the origin;
    its stream, or NULL when a rank's streams share a lane."""
    stream = "kernels.stream" if by_stream else "null::bigint"
    return (f"kernels.rank, {stream} as stream, kernels.ts_ns + shifts.shift_ns - $origin as ts, "
            "kernels.dur_ns as dur, kernels.kind, kernels.name, kernels.trace_id, "
            "kernels.slice_id")


#: The shown ranks' outermost Megatron step frames (``fct_cpu_steps``) overlapping the window,
#: on the view's axis (``ended``: the frame's end there; ``dur`` is never negative).
_FRAMES_IN_WINDOW = SHIFTS + """,
    frames as (
        select
            steps.rank,
            steps.ts_ns + shifts.shift_ns - $origin as ts,
            greatest(steps.end_ns - steps.ts_ns, 0) as dur,
            steps.end_ns + shifts.shift_ns - $origin as ended,
            coalesce(steps.phase, 'other') as kind,
            coalesce(steps.function_name, steps.phase, '?') as name,
            steps.trace_id,
            steps.slice_id
        from fct_cpu_steps as steps
        inner join shifts on steps.rank = shifts.rank
        where steps.run_id = $run and steps.rank between $low and $high
            and steps.is_outermost
            and steps.ts_ns + shifts.shift_ns - $origin < $end
            and steps.end_ns + shifts.shift_ns - $origin > $start
    )
"""


def _cpu_frames(cur: duckdb.DuckDBPyConnection, window: dict[str, Any], step: int,
                table: str | None = None) -> dict[str, list[Any]]:
    """The outermost Megatron step frames (``fct_cpu_steps``) of the shown ranks in the
    window, one per lane bucket as the kernels are (the longest, its phase as its kind);
    none without the mart. From the selection's cache ``table`` (its ``_frames``) when it
    has one: ``fct_cpu_steps`` is a view with lookups joined in, 18-35 CPU ms a read at
    1,024 ranks. A few frames per microbatch, not one per kernel, so picked in SQL. As
    :func:`_columns`, the kernels' query's names."""
    if "fct_cpu_steps" not in tables(cur):
        return {}
    frames = _FRAMES_IN_WINDOW if table is None else f"""
        frames as (select * from {table}_frames where ts < $end and ended > $start)
    """  # noqa: S608 - a name made of hex digits
    sql = f"""
        with {frames}
        select
            rank, '{CPU_LANE}' as stream, count(*) as kernels,
            arg_max(ts, {_LONGEST}) as ts, max(dur) as dur, arg_max(kind, {_LONGEST}) as kind,
            arg_max(name, {_LONGEST}) as name, arg_max(trace_id, {_LONGEST}) as trace_id,
            arg_max(slice_id, {_LONGEST}) as slice_id
        from frames
        group by rank, (greatest(ts, $start) - $start) // $step
        order by rank, 4
    """  # noqa: S608 - fixed SQL text only
    return _columns(cur, sql, bound(sql, {**window, "step": step}))


def _with_cpu_lanes(lanes: list[tuple[int, Any]], frame_ranks: list[int],
                    by_stream: bool) -> list[tuple[int, Any]]:
    """A rank's CPU steps lane (before its streams) for every rank with frames in view
    (``frame_ranks``); by stream, the empty lane of a rank without kernels there goes."""
    with_frames = set(frame_ranks)
    kept = [lane for lane in lanes
            if not (by_stream and lane[1] is None and lane[0] in with_frames)]
    return sorted([*kept, *((rank, CPU_LANE) for rank in with_frames)],
                  key=lambda lane: (lane[0], {CPU_LANE: -2, None: -1}.get(lane[1], 0),
                                    lane[1] if isinstance(lane[1], int) else 0))


def _lanes(cur: duckdb.DuckDBPyConnection, source: _Source, ranks: list[int],
           by_stream: bool) -> list[tuple[int, int | None]]:
    """Every shown rank's lanes: its streams with kernels in the window (one lane, stream
    None, when streams share a lane or it has none there)."""
    lanes: list[tuple[int, int | None]] = [(rank, None) for rank in ranks]
    if by_stream:
        sql = f"with {source.kernels} select distinct rank, stream from kernels"
        streams = cur.execute(sql, bound(sql, source.params)).fetchall()
        with_kernels = {rank for rank, _ in streams}
        lanes = sorted([lane for lane in lanes if lane[0] not in with_kernels] + streams,
                       key=lambda lane: (lane[0], lane[1] if lane[1] is not None else -1))
    return lanes


def _rank_labels(cur: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int]) -> dict[int, str]:
    """``rank 3 · pp1 tp1 dp0`` for each rank (its coordinates from fct_rank_iterations)."""
    labels = {rank: f"rank {rank}" for rank in ranks}
    for row in rows(cur, "select distinct rank, pp_stage, tp_rank, dp_rank "
                         "from fct_rank_iterations where run_id = ? and list_contains(?, rank)",
                    [run_id, ranks]):
        labels[row["rank"]] = rank_label(row)
    return labels


def _columns(cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any],
             ) -> dict[str, list[Any]]:
    """The rows of ``sql`` as a list per column (NULL as None).

    Read column by column (NumPy), as :func:`.busy.busy_cells` reads its cells: an answer of
    tens of thousands of rectangles (1,024 lanes) read as Python tuples cost more than its
    query."""
    return {key: values.tolist() for key, values in cur.execute(sql, params).fetchnumpy().items()}


def _as_cells(found: dict[str, list[Any]], lane_index: dict[tuple[int, Any], int],
              ) -> dict[str, Any]:
    """Rows of a cells query (:func:`_columns`: ``rank``, ``stream``, ``kernels``, ``ts``,
    ``dur``, ``kind``, ``name``, ``trace_id``, ``slice_id``) as :func:`.pixels.longest_per_cell`
    gives its cells: lane indexes, and each text column as (codes, texts)."""
    def encoded(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
        codes: dict[Any, int] = {}
        return (np.array([codes.setdefault(value, len(codes)) for value in values],
                         dtype=np.int64), list(codes))

    return {"lane": np.array([lane_index[lane] for lane in zip(found.get("rank", []),
                                                                found.get("stream", []))],
                             dtype=np.int64),
            **{column: np.asarray(found.get(column, []), dtype=np.int64)
               for column in ("kernels", "ts", "dur", "slice_id")},
            **{column: encoded(found.get(column, [])) for column in TEXT_COLUMNS}}


def _rectangles(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The cells of the kernel and CPU-frame queries (``parts``, as :func:`_as_cells` gives
    them, in that order) as columns; kinds, names and traces as indexes into short lists."""
    def joined(key: str) -> list[Any]:
        return np.concatenate([part[key] for part in parts]).tolist()

    def texts(column: str) -> tuple[list[int], list[Any]]:
        merged: dict[Any, int] = {}
        codes = [np.array([merged.setdefault(text, len(merged)) for text in part[column][1]],
                          dtype=np.int64)[part[column][0]] for part in parts]
        return np.concatenate(codes).tolist(), list(merged)

    counts = np.concatenate([part["kernels"] for part in parts])
    (kinds, kind_names), (names, name_list), (traces, trace_list) = (
        texts(column) for column in TEXT_COLUMNS)
    columns = {"lane": joined("lane"), "ts": joined("ts"), "dur": joined("dur"),
               "n": counts.tolist(), "kind": kinds, "name": names, "trace": traces,
               "slice": joined("slice_id")}
    return {"exact": bool((counts == 1).all()), "rects": columns,
            "kind_names": kind_names, "names": name_list, "traces": trace_list}
