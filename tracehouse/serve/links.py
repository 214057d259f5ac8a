"""The timeline's collective chains: which shown ranks met in which collective, in arrival order.

Why a module of its own: every zoom level of the timeline (busy cells, the
longest kernel per pixel, exact kernels, a cached selection) draws the same
arrows, read from the same mart; only where the members' lanes come from
differs. :func:`links` turns the members of a window into chains;
:func:`members_in_window` and :func:`members_of_kernels` are the two ways to
find them.

Where the members are read: ``fct_collective_timeline`` (fct_collective_ranks'
rows with the drawn columns, stored by run, iteration and rank, so a
selection's members skip the row groups of other ranks and iterations), or
``fct_collective_ranks`` in a warehouse built before that mart.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracehouse.serve.marts import bound, tables

#: Collective chains drawn per answer; more, and the page asks to zoom in.
MAX_LINKS = 400
#: Where the members are read, best first (see the module's docstring).
MEMBER_MARTS = ("fct_collective_timeline", "fct_collective_ranks")


def members_mart(cur: duckdb.DuckDBPyConnection) -> str:
    """The mart the members are read from (the first of :data:`MEMBER_MARTS` built)."""
    present = tables(cur)
    return next((mart for mart in MEMBER_MARTS if mart in present), MEMBER_MARTS[-1])


#: A member's columns as a chain needs them, ``{stream}`` its lane's stream (fixed text).
_MEMBER_COLUMNS = """
            members.collective_id,
            members.op,
            members.process_group_key,
            members.rank,
            {stream} as stream,
            members.arrival_ns - $origin as arrival,
            members.end_ns - $origin as ended,
            members.arrival_order,
            members.is_last,
            members.wait_ns
"""


def members_in_window(mart: str) -> str:
    """The ``members`` CTE of the shown ranks (``shifts``) that overlap the window, GPU and
    CPU calls alike, on the reference clock already: for views with one lane per rank, where
    the kernels need not be read at all. ``mart`` is one of :data:`MEMBER_MARTS`."""
    return f"""
    members as (
        select {_MEMBER_COLUMNS.format(stream="null::bigint")}
        from {mart} as members
        inner join shifts on members.rank = shifts.rank
        where members.run_id = $run and members.rank between $low and $high
            -- on the reference clock already: constant bounds, so zone maps skip row groups
            and members.arrival_ns < $aligned_end and members.end_ns > $aligned_start
    )
"""  # noqa: S608 - fixed SQL text only


def members_of_kernels(mart: str, cpu_calls: bool = False, within: bool = False) -> str:
    """The ``members`` CTE of the collectives among the ``kernels`` CTE's rows, each on its
    kernel's stream: for views with a lane per stream. With ``cpu_calls``, the shown ranks'
    CPU calls (c10d, no kernel) too, their stream NULL: what a selection's cache keeps, so
    that a lane-per-rank view of it links what :func:`members_in_window` would. ``mart`` is
    one of :data:`MEMBER_MARTS`; the shown ranks (``shifts``) and their range bound its
    scan, so that an ordered mart skips the row groups of other ranks; ``within``, the
    window too (``$aligned_start``, ``$aligned_end``: the members overlapping it)."""
    join, device = ("left", "") if cpu_calls else ("inner", "and members.device = 'gpu'")
    if within:
        device += ("\n            and members.arrival_ns < $aligned_end"
                   " and members.end_ns > $aligned_start")
    return f"""
    members as (
        select {_MEMBER_COLUMNS.format(stream="kernels.stream")}
        from {mart} as members
        inner join shifts on members.rank = shifts.rank
        {join} join kernels
            on members.trace_id = kernels.trace_id and members.slice_id = kernels.slice_id
        where members.run_id = $run and members.rank between $low and $high {device}
    )
"""  # noqa: S608 - fixed SQL text only


def links(cur: duckdb.DuckDBPyConnection, kernels: str, members: str, params: dict[str, Any],
          lane_index: dict[tuple[int, Any], int]) -> dict[str, Any]:
    """Collective instances with two or more shown members in the window, members in arrival
    order, at most :data:`MAX_LINKS` (``links_left_out`` says how many more there were).

    ``kernels`` and ``members`` are the CTEs (fixed text) the members come from, ``params``
    the values they bind; ``lane_index`` maps a member's (rank, stream) to its lane."""
    if tables(cur).isdisjoint(MEMBER_MARTS):
        return {"links": [], "links_left_out": 0}
    sql = f"""
        with {kernels},
        {members},
        chains as (
            select collective_id, min(arrival) as first_arrival, count(*) over () as chains
            from members
            group by collective_id
            having count(*) >= 2
        ),
        shown as (
            -- the first $limit by first arrival: a top-N, not a numbering of every chain
            select * from chains order by first_arrival, collective_id limit $limit
        )
        select members.*, shown.chains
        from members
        inner join shown on members.collective_id = shown.collective_id
        order by shown.first_arrival, shown.collective_id, members.arrival_order, members.rank
    """  # noqa: S608 - fixed SQL text only
    # Column by column (NumPy), as the timeline's cells: 400 chains of a 1,024-rank window
    # hold thousands of members, and a dict per row cost more than the query's join.
    found = {key: values.tolist() for key, values in
             cur.execute(sql, bound(sql, {**params, "limit": MAX_LINKS})).fetchnumpy().items()}
    lanes = [lane_index[key] for key in zip(found["rank"], found["stream"])]
    chains: dict[str, dict[str, Any]] = {}
    for row, collective in enumerate(found["collective_id"]):
        link = chains.get(collective)
        if link is None:
            link = chains[collective] = {"op": found["op"][row],
                                         "group": found["process_group_key"][row],
                                         "members": []}
        link["members"].append([lanes[row], found["arrival"][row], found["ended"][row],
                                found["wait_ns"][row] or 0, bool(found["is_last"][row])])
    total = found["chains"][0] if found["chains"] else 0
    return {"links": list(chains.values()), "links_left_out": max(0, total - MAX_LINKS)}
