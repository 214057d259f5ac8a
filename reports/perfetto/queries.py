"""The mart queries of the Perfetto export: the ranks, their clock offsets, and each
mart's rows as :class:`~.slices.Slice` objects on a named track.

Rows stream from DuckDB in batches of :data:`FETCH_ROWS`, ordered by rank,
track and time (DuckDB sorts out of core), so the layout can place them one
track at a time. Every value is bound; the SQL text holds only fixed
fragments (table and column names chosen here).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb

from tracehouse.reports.kernel_names import short_kernel_name

from .slices import ExportError, Rank, Slice, clean_text

#: Optional table of per-rank clock corrections (see the package docstring).
OFFSETS_TABLE = "dim_rank_clock_offsets"
#: Optional table of collective members matched across ranks (flow arrows).
FLOWS_TABLE = "fct_collective_ranks"

#: Rows fetched from DuckDB at a time.
FETCH_ROWS = 20_000
#: Longest short kernel name put in a slice's name (the full name is in the args).
SHORT_NAME_CHARS = 48

_COORDINATES = ("pp", "tp", "dp", "cp", "ep")


def mart_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables and views of the database's main schema (optional marts may be missing)."""
    return {row[0] for row in con.execute(
        "select table_name from information_schema.tables where table_schema = 'main'"
    ).fetchall()}


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    """The columns of one main-schema table (older builds lack some)."""
    return {row[0] for row in con.execute(
        "select column_name from information_schema.columns"
        " where table_schema = 'main' and table_name = ?", [table]).fetchall()}


def has_offsets(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str) -> bool:
    """True when :data:`OFFSETS_TABLE` exists with the hook's columns and rows for the run."""
    if OFFSETS_TABLE not in tables or not {"run_id", "rank", "offset_ns"} <= table_columns(
            con, OFFSETS_TABLE):
        return False
    row = con.execute(f"select count(*) from {OFFSETS_TABLE} where run_id = ?",  # noqa: S608
                      [run_id]).fetchone()
    return bool(row and row[0])


def select_ranks(con: duckdb.DuckDBPyConnection, run_id: str, ranks: Sequence[int] | None,
                 pp_group: int | None, replica: int | None) -> list[Rank]:
    """The selected ranks of the run, in rank order, with their track names."""
    rows = con.execute(
        "select rank, pp_rank, tp_rank, dp_rank, cp_rank, ep_rank, pp_group_index,"
        " model_replica from dim_ranks where run_id = ? order by rank", [run_id]).fetchall()
    if not rows:
        known = [row[0] for row in con.execute(
            "select distinct run_id from dim_ranks order by run_id").fetchall()]
        raise ExportError(f"run {run_id!r} is not in the warehouse (runs: "
                          f"{', '.join(known) or 'none'}); pick one with --run")
    # Show cp and ep only when the run has more than one of them; pp, tp and
    # dp whenever they are known.
    widest = {kind: max((row[1 + index] or 0) for row in rows)
              for index, kind in enumerate(_COORDINATES)}
    chosen = rows
    if ranks is not None:
        wanted = {int(rank) for rank in ranks}
        unknown = sorted(wanted - {row[0] for row in rows})
        if unknown:
            raise ExportError(f"rank(s) {', '.join(map(str, unknown))} not in run {run_id!r} "
                              f"(ranks {rows[0][0]}..{rows[-1][0]})")
        chosen = [row for row in chosen if row[0] in wanted]
    if pp_group is not None:
        chosen = [row for row in chosen if row[6] == pp_group]
    if replica is not None:
        chosen = [row for row in chosen if row[7] == replica]
    if not chosen:
        raise ExportError(f"no rank of run {run_id!r} matches the selection (ranks={ranks}, "
                          f"pp_group={pp_group}, replica={replica}); see dim_ranks for "
                          "pp_group_index and model_replica")
    selected = []
    for row in chosen:
        parts = [f"{kind}{row[1 + index]}" for index, kind in enumerate(_COORDINATES)
                 if row[1 + index] is not None and (index < 3 or widest[kind] > 0)]
        name = f"rank {row[0]}" + (f" · {' '.join(parts)}" if parts else "")
        selected.append(Rank(rank=int(row[0]), name=name))
    return selected


def json_origin(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str,
                ranks: list[int], offsets: bool) -> int:
    """The JSON time origin: the whole second at or before the export's first start."""
    firsts = []
    sources = [("fct_kernels", "ts_ns")]
    if "fct_cpu_steps" in tables:
        sources.append(("fct_cpu_steps", "ts_ns"))
    if "fct_cpu_collectives" in tables:
        sources.append(("fct_cpu_collectives", "ts_ns"))
    for table, column in sources:
        offset, join = _offset_join(offsets, "events")
        row = con.execute(
            f"select min(events.{column} + {offset}) from {table} as events{join}"  # noqa: S608
            " where events.run_id = ? and events.rank in (select unnest(?::bigint[]))",
            [run_id, ranks]).fetchone()
        if row and row[0] is not None:
            firsts.append(int(row[0]))
    first = min(firsts, default=0)
    return first - first % 1_000_000_000


def _fetch(cursor: duckdb.DuckDBPyConnection) -> Iterator[tuple[Any, ...]]:
    while True:
        rows = cursor.fetchmany(FETCH_ROWS)
        if not rows:
            return
        yield from rows


def _offset_join(offsets: bool, alias: str) -> tuple[str, str]:
    """SQL fragments (fixed text, no data) adding a rank's clock offset when the table exists."""
    if not offsets:
        return "0", ""
    return ("coalesce(clock.offset_ns, 0)",
            f" left join {OFFSETS_TABLE} as clock on clock.run_id = {alias}.run_id"
            f" and clock.rank = {alias}.rank")


def _flow_join(flows: bool, alias: str) -> tuple[str, str, str]:
    """SQL fragments (fixed text) giving each slice its collective flow: (id, order, members).

    Only members among the exported ranks count: a flow needs two of them.
    The CTE ``flow_members`` numbers the run's matched instances.
    """
    if not flows:
        return "", "null, null, null", ""
    cte = f"""
        with flow_members as (
            select
                trace_id, slice_id,
                dense_rank() over (order by collective_id) as flow_id,
                row_number() over (
                    partition by collective_id order by arrival_ns, rank) as flow_order,
                count(*) over (partition by collective_id) as flow_members
            from {FLOWS_TABLE}
            where run_id = ? and rank in (select unnest(?::bigint[]))
        )
    """  # noqa: S608 - fixed text
    join = (f" left join flow_members on flow_members.trace_id = {alias}.trace_id"
            f" and flow_members.slice_id = {alias}.slice_id")
    return cte, ("flow_members.flow_id, flow_members.flow_order, flow_members.flow_members"), join


def _flow(flow_id: int | None, order: int | None,
          members: int | None) -> tuple[int, int, int] | None:
    """(id, arrival order, members) of a slice in a collective flow of two members or more."""
    if flow_id is None or order is None or members is None or members < 2:
        return None
    return int(flow_id), int(order), int(members)


def cpu_collective_slices(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
                          offsets: bool, flows: bool) -> Iterator[tuple[int, str, str, Slice]]:
    """(rank, track key, track label, slice) per ``fct_cpu_collectives`` call, in track order."""
    offset, join = _offset_join(offsets, "calls")
    cte, flow_columns, flow_join = _flow_join(flows, "calls")
    sql = f"""{cte}
        select
            calls.rank, calls.track_id,
            calls.ts_ns + {offset} as start_ns,
            greatest(calls.end_ns, calls.ts_ns) + {offset} as end_ns,
            calls.name, calls.event_type, calls.comm_group_kind, calls.comm_process_group_kind,
            calls.comm_group_index, calls.iteration, calls.call_site_function,
            calls.trace_id, calls.slice_id, {flow_columns}
        from fct_cpu_collectives as calls{join}{flow_join}
        where calls.run_id = ? and calls.rank in (select unnest(?::bigint[]))
        order by calls.rank, calls.track_id, start_ns, end_ns desc, calls.trace_id,
            calls.slice_id
    """  # noqa: S608 - fixed fragments only; values are bound
    params: list[Any] = ([run_id, ranks] if flows else []) + [run_id, ranks]
    cursor = con.cursor()
    try:
        cursor.execute(sql, params)
        for (rank, track_id, start, end, name, event_type, group, process_group_kind,
             group_index, iteration, function, trace_id, slice_id, flow_id, flow_order,
             flow_members) in _fetch(cursor):
            label = f"CPU collectives · track {track_id}"
            text = clean_text(name or "")
            static = (
                ("call", text), ("event_type", event_type), ("comm_group_kind", group),
                ("process_group_kind", process_group_kind), ("group_index", group_index),
                ("iteration", iteration),
                ("call_site", None if function is None else clean_text(function)),
                ("trace_id", trace_id),
            )
            yield rank, f"collectives/{track_id}", label, Slice(
                start=start, end=end, name=f"{text} [{group or '?'}]",
                category="communication", colour=f"comm {group}" if group else "comm",
                static=static, dynamic=(("slice_id", slice_id),),
                flow=_flow(flow_id, flow_order, flow_members))
    finally:
        cursor.close()


def kernel_slices(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int], offsets: bool,
                  columns: set[str], flows: bool = False) -> Iterator[tuple[int, str, str, Slice]]:
    """(rank, track key, track label, slice) per ``fct_kernels`` row, one track per stream."""
    offset, join = _offset_join(offsets, "kernels")
    cte, flow_columns, flow_join = _flow_join(flows, "kernels")
    vpp = "kernels.vpp_chunk" if "vpp_chunk" in columns else "null"
    chunk_mb = "kernels.chunk_microbatch" if "chunk_microbatch" in columns else "null"
    sql = f"""{cte}
        select
            kernels.rank, kernels.device, kernels.stream,
            kernels.ts_ns + {offset} as start_ns,
            greatest(coalesce(kernels.dur_ns, 0), 0) as dur_ns,
            kernels.name, kernels.category, kernels.kind, kernels.phase,
            kernels.iteration, kernels.microbatch, {vpp} as vpp_chunk,
            {chunk_mb} as chunk_microbatch, kernels.comm_group_kind,
            kernels.process_group_desc, kernels.correlation, kernels.trace_id,
            kernels.slice_id, {flow_columns}
        from fct_kernels as kernels{join}{flow_join}
        where kernels.run_id = ? and kernels.rank in (select unnest(?::bigint[]))
        order by kernels.rank, kernels.device nulls first, kernels.stream nulls first,
            start_ns, dur_ns desc, kernels.trace_id, kernels.slice_id
    """  # noqa: S608 - fixed fragments only; values are bound
    cursor = con.cursor()
    try:
        cursor.execute(sql, ([run_id, ranks] if flows else []) + [run_id, ranks])
        for (rank, device, stream, start, dur, name, category, kind, phase, iteration,
             microbatch, vpp_chunk, chunk_microbatch, group, pg_desc, correlation, trace_id,
             slice_id, flow_id, flow_order, flow_members) in _fetch(cursor):
            full, short = kernel_names(name)
            kind_label = kind or "kernel"
            if kind == "communication":
                kind_label = f"comm {group}" if group else "comm"
            step = _step_label(phase, microbatch, vpp_chunk, chunk_microbatch)
            static = (
                ("kernel", full), ("kind", kind), ("phase", phase), ("iteration", iteration),
                ("microbatch", microbatch), ("vpp_chunk", vpp_chunk),
                ("chunk_microbatch", chunk_microbatch), ("comm_group_kind", group),
                ("process_group_desc", None if pg_desc is None else clean_text(pg_desc)),
                ("category", category), ("device", device), ("stream", stream),
                ("trace_id", trace_id),
            )
            label = (f"GPU {device} stream {stream}" if device is not None
                     else f"stream {stream}")
            yield rank, f"{device}/{stream}", label, Slice(
                start=start, end=start + dur, name=f"{step} · {kind_label} · {short}",
                category=kind or "kernel", colour=kind_label, static=static,
                dynamic=(("correlation", correlation), ("slice_id", slice_id)),
                flow=_flow(flow_id, flow_order, flow_members))
    finally:
        cursor.close()


def cpu_step_slices(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
                    offsets: bool) -> Iterator[tuple[int, str, str, Slice]]:
    """(rank, track key, track label, slice) per ``fct_cpu_steps`` frame, one track per thread."""
    offset, join = _offset_join(offsets, "steps")
    sql = f"""
        select
            steps.rank,
            coalesce('thread ' || steps.tid, 'track ' || steps.track_id) as thread_key,
            steps.thread_name,
            steps.ts_ns + {offset} as start_ns, steps.end_ns + {offset} as end_ns,
            steps.phase, steps.function_name, steps.file_path, steps.iteration,
            steps.microbatch, steps.vpp_chunk, steps.chunk_microbatch,
            steps.is_outermost, steps.trace_id, steps.slice_id
        from fct_cpu_steps as steps{join}
        where steps.run_id = ? and steps.rank in (select unnest(?::bigint[]))
        order by steps.rank, thread_key, start_ns, end_ns desc, steps.trace_id, steps.slice_id
    """  # noqa: S608 - fixed fragments only; values are bound
    cursor = con.cursor()
    try:
        cursor.execute(sql, [run_id, ranks])
        for (rank, thread_key, thread_name, start, end, phase, function, file_path, iteration,
             microbatch, vpp_chunk, chunk_microbatch, is_outermost, trace_id,
             slice_id) in _fetch(cursor):
            end = max(end, start)
            function = clean_text(function or "")
            frame = f"{clean_text(file_path)}: {function}" if file_path else function
            step = _step_label(phase, microbatch, vpp_chunk, chunk_microbatch)
            label = f"CPU {clean_text(thread_name or thread_key)}"
            static = (
                ("frame", frame), ("phase", phase), ("iteration", iteration),
                ("microbatch", microbatch), ("vpp_chunk", vpp_chunk),
                ("chunk_microbatch", chunk_microbatch), ("is_outermost", is_outermost),
                ("thread", label), ("trace_id", trace_id),
            )
            yield rank, thread_key, label, Slice(
                start=start, end=end, name=f"{step} · {function}", category="cpu_step",
                colour=f"cpu {phase}", static=static, dynamic=(("slice_id", slice_id),))
    finally:
        cursor.close()


def _step_label(phase: str | None, microbatch: int | None, vpp_chunk: int | None,
                chunk_microbatch: int | None) -> str:
    """``forward mb3``, ``backward c1 mb2`` (VPP: chunk and Megatron's id in it), ``optimizer``."""
    label = phase or "other"
    if vpp_chunk is not None:
        label += f" c{vpp_chunk}"
        if chunk_microbatch is not None:
            return f"{label} mb{chunk_microbatch}"
    if microbatch is not None:
        label += f" mb{microbatch}"
    return label


@functools.lru_cache(maxsize=65_536)
def kernel_names(name: str | None) -> tuple[str, str]:
    """(cleaned full name, short name) of a kernel; cached: a run has few distinct names.

    The short name is the charts' and the report table's
    (:func:`tracehouse.reports.kernel_names.short_kernel_name`), so a kernel
    found on a chart is found by the same name on the timeline.
    """
    full = clean_text(name or "")
    return full, short_kernel_name(full, SHORT_NAME_CHARS)
