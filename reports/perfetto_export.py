"""One merged Perfetto timeline of many ranks: ``tracehouse export perfetto``.

Why: a rank's own Kineto trace shows one GPU; stragglers, pipeline bubbles
and exposed communication only show when the ranks of a pipeline group or a
model replica sit on one time axis. This writes that axis from the
warehouse, so the picture uses the same classification (kind, phase,
microbatch, communication group) as every mart and chart.

What is written, per selected rank (a process track named with the rank's
coordinates from ``dim_ranks``, e.g. ``rank 5 · pp1 tp1 dp0``):

* one thread track per CPU thread holding Megatron step frames (forward,
  backward, pp_p2p, dp_sync, optimizer, nested as in the trace), from the
  mart ``fct_cpu_steps``, with the thread's name;
* one thread track per GPU stream holding its kernels, copies and fills
  from the mart ``fct_kernels``, each slice named
  ``<phase> mb<microbatch> · <kind> [group] · <short kernel name>`` (with
  ``c<vpp chunk>`` when the warehouse knows the chunk); the full kernel name
  and every classification column are kept in the slice's args.

Slices on one track must nest for Perfetto (its importers drop or truncate
partial overlaps). A kernel that partially overlaps an earlier one of its
stream (clock rounding, copies on a shared stream) therefore moves to an
extra track ``… (overlap N)`` of the same rank instead of being lost (one
that lies wholly inside another is drawn nested under it); CPU frames that
partially overlap their parent do the same. Every row becomes one slice.

Colour: Perfetto's UI colours a slice by a hash of its name unless the
event carries a ``correlation_id_str``, which it uses instead (added to the
UI in 2025); the export sets it to the kernel kind (``compute``,
``comm tp``, ``memory``) or ``cpu <phase>``, so one kind is one colour.
The Chrome JSON option sets the legacy ``cname`` instead, which
chrome://tracing honours and Perfetto ignores.

* one thread track per CPU thread holding c10d collective calls and gloo
  waits (CPU-only runs: gloo, CPU captures) from the mart
  ``fct_cpu_collectives``, each named ``c10d::<op> [group kind]``.

Clock offsets: when the warehouse has ``dim_rank_clock_offsets(run_id,
rank, offset_ns)`` with rows for the run (the distributed marts build it),
each rank's ``offset_ns`` is added to all of its times (offset = reference
clock − rank clock, the value that aligns the rank to the reference; a rank
without a row keeps its own clock). Without it, times are the traces' own
absolute nanoseconds.

Flow arrows: the members of every collective instance or P2P transfer
matched across ranks (``fct_collective_ranks``) that are in the export are
linked by one flow, in arrival order, from the first rank to arrive to the
last (the one everybody waited for): Perfetto draws the arrows between the
ranks' slices (protobuf ``flow_ids``/``terminating_flow_ids``; JSON flow
events ``s``/``t``/``f`` bound to the slices).

Scale: nothing holds a run in memory. Rows stream from DuckDB in batches
(ordered by rank, track and time; DuckDB sorts out of core within its
``memory_limit`` and spills to ``<database>.tmp``), packets are written to
the file in batches, the interning tables are reset when they grow past
:data:`INTERN_LIMIT` entries and the cache of serialized event parts is
bounded by :data:`EVENT_CACHE_LIMIT`. Measured on 2 shared cores: 1,024
ranks x 1,000 kernels (1.04 M slices) in ~31 s of CPU, 179 MB of protobuf.

Formats: ``proto`` (default; a ``Trace`` of ``TracePacket``s with
``TrackDescriptor`` and ``TrackEvent`` from the ``perfetto`` package's
protobuf definitions, event names and long arg strings interned) and
``json`` (Chrome trace-event JSON: ``X`` events, times in microseconds
since ``otherData.origin_ns`` so that a double holds them to the nanosecond,
the exact absolute ns in each event's args; strings JSON-escaped, non-ASCII
kept as UTF-8). The protobuf keeps absolute nanoseconds.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.reports.kernel_names import short_kernel_name

#: Output formats of :func:`export_perfetto`.
FORMATS = ("proto", "json")

#: Optional table of per-rank clock corrections (see the module docstring).
OFFSETS_TABLE = "dim_rank_clock_offsets"
#: Optional table of collective members matched across ranks (flow arrows).
FLOWS_TABLE = "fct_collective_ranks"

#: pid of rank r is PID_BASE + r: Perfetto treats pid 0 as the idle task.
PID_BASE = 100_000
#: Thread ids of rank r's tracks are (PID_BASE + r) * TIDS_PER_RANK + k, unique in the file.
TIDS_PER_RANK = 1_000

#: Packets buffered before one write to the file.
BATCH_PACKETS = 4_096
#: Rows fetched from DuckDB at a time.
FETCH_ROWS = 20_000
#: Interned strings kept before the sequence's interning state is reset.
INTERN_LIMIT = 100_000
#: Serialized repeating parts of slices kept for reuse (a bounded cache).
EVENT_CACHE_LIMIT = 20_000
#: Longest short kernel name put in a slice's name (the full name is in the args).
SHORT_NAME_CHARS = 48

_SEQUENCE_ID = 1
_SEQ_INCREMENTAL_STATE_CLEARED = 1
_SEQ_NEEDS_INCREMENTAL_STATE = 2

#: chrome://tracing reserved colour names per kind (JSON only; Perfetto ignores them).
_JSON_COLOURS = {
    "compute": "thread_state_running",
    "communication": "thread_state_iowait",
    "memory": "thread_state_runnable",
    "cpu": "generic_work",
}


class ExportError(Exception):
    """The export cannot run: no database, unknown run or ranks, empty selection, bad format."""


@dataclass
class ExportResult:
    """What :func:`export_perfetto` wrote."""

    path: Path
    fmt: str
    run_id: str
    ranks: tuple[int, ...]
    kernel_slices: int = 0
    cpu_step_slices: int = 0
    cpu_collective_slices: int = 0
    flows: int = 0
    tracks: int = 0
    overlap_tracks: int = 0
    offsets_applied: bool = False
    cpu_steps_source: str | None = None
    origin_ns: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    process_names: dict[int, str] = field(default_factory=dict)

    @property
    def slices(self) -> int:
        """Kernel slices plus CPU step and CPU collective slices."""
        return self.kernel_slices + self.cpu_step_slices + self.cpu_collective_slices

    def summary(self) -> str:
        """One line for the command line: what went into the file."""
        ranks = len(self.ranks)
        offsets = ", clock offsets applied" if self.offsets_applied else ""
        collectives = (f", {self.cpu_collective_slices:,} CPU collective calls"
                       if self.cpu_collective_slices else "")
        flows = f", {self.flows:,} collective flows" if self.flows else ""
        return (f"{ranks} rank{'s' if ranks != 1 else ''}, {self.kernel_slices:,} kernel "
                f"slices and {self.cpu_step_slices:,} CPU steps{collectives} on "
                f"{self.tracks:,} tracks{flows} "
                f"({self.bytes_written / 1e6:.1f} MB {self.fmt}{offsets})")


# --------------------------------------------------------------------------- entry point


def export_perfetto(
    warehouse_root: Path,
    run_id: str,
    out: Path,
    ranks: Sequence[int] | None = None,
    pp_group: int | None = None,
    replica: int | None = None,
    fmt: str = "proto",
) -> ExportResult:
    """Write one merged timeline of the selected ranks of ``run_id`` to ``out``.

    Args:
        warehouse_root: the warehouse folder (its ``tracehouse.duckdb`` is
            opened read-only).
        run_id: the run.
        out: the file to write; written to a temporary name next to it and
            renamed into place, so a reader never sees half a trace.
        ranks: global ranks to include.
        pp_group: only ranks whose ``dim_ranks.pp_group_index`` is this.
        replica: only ranks whose ``dim_ranks.model_replica`` is this.
            Selectors combine (intersection); none selects every rank.
        fmt: ``proto`` (Perfetto protobuf) or ``json`` (Chrome JSON).

    Raises:
        ExportError: no built database, unknown run, ranks not in the run,
            an empty selection or an unknown format; the message says what
            to do.
    """
    started = time.monotonic()
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    place = Warehouse(Path(warehouse_root).resolve())
    if not place.database.is_file():
        raise ExportError(f"{place.database} does not exist: load traces and build the "
                          f"warehouse first (`tracehouse ingest PATH --warehouse {place.root}` "
                          f"then `tracehouse build --warehouse {place.root}`)")
    out = Path(out)
    try:
        con = duckdb.connect(str(place.database), read_only=True)
    except duckdb.Error as exc:
        hint = (" (is `tracehouse build` or ingest writing it? retry when it is done)"
                if "lock" in str(exc).lower() else "")
        raise ExportError(f"cannot open {place.database}: {exc}{hint}") from exc
    try:
        tables = _tables(con)
        missing = {"dim_ranks", "fct_kernels"} - tables
        if missing:
            raise ExportError(f"{place.database} has no {', '.join(sorted(missing))}: run "
                              f"`tracehouse build --warehouse {place.root}`")
        selected = _select_ranks(con, run_id, ranks, pp_group, replica)
        result = ExportResult(path=out, fmt=fmt, run_id=run_id,
                              ranks=tuple(rank.rank for rank in selected))
        result.offsets_applied = _has_offsets(con, tables, run_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                sink: _Sink
                if fmt == "proto":
                    sink = _ProtoSink(handle)
                else:
                    result.origin_ns = _origin(con, tables, run_id, list(result.ranks),
                                               result.offsets_applied)
                    sink = _JsonSink(handle, result.origin_ns, run_id)
                _write(con, tables, run_id, selected, sink, result)
                sink.close()
            _readable(Path(tmp_name))
            os.replace(tmp_name, out)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    finally:
        con.close()
    result.bytes_written = out.stat().st_size
    result.seconds = time.monotonic() - started
    return result


def _readable(path: Path) -> None:
    """Give a temporary file (created 0600) the permissions a new file would have."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class _Rank:
    rank: int
    name: str

    @property
    def pid(self) -> int:
        return PID_BASE + self.rank


_COORDINATES = ("pp", "tp", "dp", "cp", "ep")


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {row[0] for row in con.execute(
        "select table_name from information_schema.tables where table_schema = 'main'"
    ).fetchall()}


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {row[0] for row in con.execute(
        "select column_name from information_schema.columns"
        " where table_schema = 'main' and table_name = ?", [table]).fetchall()}


def _has_offsets(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str) -> bool:
    """True when :data:`OFFSETS_TABLE` exists with the hook's columns and rows for the run."""
    if OFFSETS_TABLE not in tables or not {"run_id", "rank", "offset_ns"} <= _columns(
            con, OFFSETS_TABLE):
        return False
    row = con.execute(f"select count(*) from {OFFSETS_TABLE} where run_id = ?",  # noqa: S608
                      [run_id]).fetchone()
    return bool(row and row[0])


def _select_ranks(con: duckdb.DuckDBPyConnection, run_id: str, ranks: Sequence[int] | None,
                  pp_group: int | None, replica: int | None) -> list[_Rank]:
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
        selected.append(_Rank(rank=int(row[0]), name=name))
    return selected


# --------------------------------------------------------------------------- rows to slices


@dataclass
class _Slice:
    """One slice; ``static`` args repeat across many slices (cached), ``dynamic`` ones do not."""

    start: int
    end: int
    name: str
    category: str
    colour: str
    static: tuple[tuple[str, Any], ...]
    dynamic: tuple[tuple[str, Any], ...]
    #: (flow id, order, members) when the slice is a member of a matched collective.
    flow: tuple[int, int, int] | None = None


class _Lanes:
    """Tracks of one rank's thread or stream: slices nest within a lane, never overlap partly.

    The first lane is the thread or stream itself; a slice that would
    partially overlap an open slice on every existing lane opens a new lane
    (``… (overlap N)``). Each lane keeps the stack of its open slices and
    emits ends in time order before the next begin, as Perfetto expects.
    """

    def __init__(self, rank: _Rank, label: str, writer: _Writer) -> None:
        self.rank = rank
        self.label = label
        self.writer = writer
        self.uuids: list[int] = []
        self.stacks: list[list[int]] = []

    def add(self, item: _Slice) -> None:
        for lane, stack in enumerate(self.stacks):
            self._close_until(lane, item.start)
            if not stack or stack[-1] >= item.end:
                break
        else:
            lane = len(self.stacks)
            label = self.label if lane == 0 else f"{self.label} (overlap {lane})"
            self.uuids.append(self.writer.new_track(self.rank, label, overlap=lane > 0))
            self.stacks.append([])
        self.writer.sink.begin(self.uuids[lane], item)
        self.stacks[lane].append(item.end)

    def _close_until(self, lane: int, ts: int) -> None:
        stack = self.stacks[lane]
        while stack and stack[-1] <= ts:
            self.writer.sink.end(self.uuids[lane], stack.pop())

    def close(self) -> None:
        for lane, stack in enumerate(self.stacks):
            while stack:
                self.writer.sink.end(self.uuids[lane], stack.pop())


class _Writer:
    """Allocates track ids per rank and feeds the sink."""

    def __init__(self, sink: _Sink, result: ExportResult) -> None:
        self.sink = sink
        self.result = result
        self.next_thread: dict[int, int] = {}

    def new_track(self, rank: _Rank, label: str, overlap: bool) -> int:
        index = self.next_thread.get(rank.rank, 1)
        self.next_thread[rank.rank] = index + 1
        if index >= TIDS_PER_RANK:
            raise ExportError(f"rank {rank.rank} needs more than {TIDS_PER_RANK - 1} tracks")
        tid = rank.pid * TIDS_PER_RANK + index
        self.sink.thread(rank, tid, label)
        self.result.tracks += 1
        self.result.overlap_tracks += int(overlap)
        return tid


def _origin(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str, ranks: list[int],
            offsets: bool) -> int:
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


def _write(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str,
           selected: list[_Rank], sink: _Sink, result: ExportResult) -> None:
    by_rank = {rank.rank: rank for rank in selected}
    for rank in selected:
        sink.process(rank)
        result.process_names[rank.rank] = rank.name
    writer = _Writer(sink, result)
    rank_list = [rank.rank for rank in selected]
    offsets = result.offsets_applied

    if "fct_cpu_steps" in tables:
        result.cpu_steps_source = "fct_cpu_steps"
        for lanes, item in _grouped(_cpu_steps(con, run_id, rank_list, offsets),
                                    by_rank, writer):
            lanes.add(item)
            result.cpu_step_slices += 1

    flows = FLOWS_TABLE in tables
    if "fct_cpu_collectives" in tables:
        for lanes, item in _grouped(_cpu_collectives(con, run_id, rank_list, offsets, flows),
                                    by_rank, writer):
            lanes.add(item)
            result.cpu_collective_slices += 1
            result.flows += int(item.flow is not None and item.flow[1] == 1)

    kernel_columns = _columns(con, "fct_kernels")
    for lanes, item in _grouped(_kernels(con, run_id, rank_list, offsets, kernel_columns,
                                         flows),
                                by_rank, writer):
        lanes.add(item)
        result.kernel_slices += 1
        result.flows += int(item.flow is not None and item.flow[1] == 1)


def _grouped(rows: Iterator[tuple[int, str, str, _Slice]], by_rank: dict[int, _Rank],
             writer: _Writer) -> Iterator[tuple[_Lanes, _Slice]]:
    """Pair each slice with the lanes of its (rank, track key), closing a track when it ends.

    ``rows`` (rank, key, label, slice) arrive ordered by rank, key and time,
    so one track is open at a time.
    """
    current: tuple[int, str] | None = None
    lanes: _Lanes | None = None
    for rank, key, label, item in rows:
        if (rank, key) != current:
            if lanes is not None:
                lanes.close()
            current = (rank, key)
            lanes = _Lanes(by_rank[rank], label, writer)
        assert lanes is not None
        yield lanes, item
    if lanes is not None:
        lanes.close()


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


def _cpu_collectives(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
                     offsets: bool, flows: bool) -> Iterator[tuple[int, str, str, _Slice]]:
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
            yield rank, f"collectives/{track_id}", label, _Slice(
                start=start, end=end, name=f"{text} [{group or '?'}]",
                category="communication", colour=f"comm {group}" if group else "comm",
                static=static, dynamic=(("slice_id", slice_id),),
                flow=_flow(flow_id, flow_order, flow_members))
    finally:
        cursor.close()


def _kernels(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int], offsets: bool,
             columns: set[str], flows: bool = False) -> Iterator[tuple[int, str, str, _Slice]]:
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
            full, short = _kernel_names(name)
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
            yield rank, f"{device}/{stream}", label, _Slice(
                start=start, end=start + dur, name=f"{step} · {kind_label} · {short}",
                category=kind or "kernel", colour=kind_label, static=static,
                dynamic=(("correlation", correlation), ("slice_id", slice_id)),
                flow=_flow(flow_id, flow_order, flow_members))
    finally:
        cursor.close()


def _cpu_steps(con: duckdb.DuckDBPyConnection, run_id: str, ranks: list[int],
               offsets: bool) -> Iterator[tuple[int, str, str, _Slice]]:
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
            yield rank, thread_key, label, _Slice(
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
def _kernel_names(name: str | None) -> tuple[str, str]:
    """(cleaned full name, short name) of a kernel; cached: a run has few distinct names.

    The short name is the charts' and the report table's
    (:func:`tracehouse.reports.kernel_names.short_kernel_name`), so a kernel
    found on a chart is found by the same name on the timeline.
    """
    full = clean_text(name or "")
    return full, short_kernel_name(full, SHORT_NAME_CHARS)


_UNENCODABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(value: Any) -> str:
    """Trace-derived text made safe for protobuf and JSON: valid UTF-8, no NUL.

    DuckDB strings are valid UTF-8, but a Python ``str`` can still hold lone
    surrogates (and NUL bytes break C-string readers): both become U+FFFD.
    """
    text = value if isinstance(value, str) else str(value)
    return _UNENCODABLE.sub("\ufffd", text)


# --------------------------------------------------------------------------- sinks


class _Sink:
    """Where tracks and slices go; one subclass per format."""

    def process(self, rank: _Rank) -> None:
        raise NotImplementedError

    def thread(self, rank: _Rank, tid: int, label: str) -> None:
        raise NotImplementedError

    def begin(self, tid: int, item: _Slice) -> None:
        raise NotImplementedError

    def end(self, tid: int, ts: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _ProtoSink(_Sink):
    """Perfetto protobuf: a ``Trace`` written packet by packet (field 1, length-delimited).

    Track uuids: a rank's process track is its pid, a thread track its tid
    (both unique in the file). Event names, debug-annotation names and
    string values are interned on one trusted sequence; the interning state
    is cleared and rebuilt when it grows past :data:`INTERN_LIMIT`.
    """

    def __init__(self, handle: IO[bytes]) -> None:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        self.pb = pb
        self.handle = handle
        self.buffer: list[bytes] = []
        self.names: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}
        self.strings: dict[str, int] = {}
        self.events: dict[tuple[Any, ...], bytes] = {}
        self.cleared = False
        self.begin_type = pb.TrackEvent.TYPE_SLICE_BEGIN
        self.end_type = pb.TrackEvent.TYPE_SLICE_END

    def _emit(self, packet: Any) -> None:
        self._emit_bytes(packet.SerializeToString())

    def _emit_bytes(self, data: bytes) -> None:
        """Append one serialized TracePacket as ``Trace.packet`` (field 1, tag 0x0a)."""
        self.buffer.append(b"\x0a" + _varint(len(data)) + data)
        if len(self.buffer) >= BATCH_PACKETS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.handle.write(b"".join(self.buffer))
            self.buffer.clear()

    def process(self, rank: _Rank) -> None:
        packet = self.pb.TracePacket()
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        track = packet.track_descriptor
        track.uuid = rank.pid
        track.process.pid = rank.pid
        track.process.process_name = rank.name
        self._emit(packet)

    def thread(self, rank: _Rank, tid: int, label: str) -> None:
        packet = self.pb.TracePacket()
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        track = packet.track_descriptor
        track.uuid = tid
        track.parent_uuid = rank.pid
        track.thread.pid = rank.pid
        track.thread.tid = tid
        track.thread.thread_name = label
        self._emit(packet)

    def _packet(self, ts: int) -> Any:
        packet = self.pb.TracePacket()
        packet.timestamp = ts
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        if len(self.names) + len(self.arg_names) + len(self.strings) > INTERN_LIMIT:
            self.names.clear()
            self.arg_names.clear()
            self.strings.clear()
            self.events.clear()
            self.cleared = False
        if not self.cleared:
            packet.sequence_flags = _SEQ_INCREMENTAL_STATE_CLEARED | _SEQ_NEEDS_INCREMENTAL_STATE
            self.cleared = True
        else:
            packet.sequence_flags = _SEQ_NEEDS_INCREMENTAL_STATE
        return packet

    @staticmethod
    def _intern(table: dict[str, int], text: str) -> tuple[int, bool]:
        iid = table.get(text)
        if iid is not None:
            return iid, False
        iid = len(table) + 1
        table[text] = iid
        return iid, True

    def begin(self, tid: int, item: _Slice) -> None:
        packet = self._packet(item.start)
        interned = self.pb.InternedData()
        key = (item.name, item.category, item.colour, item.static)
        static = self.events.get(key)
        if static is None:
            if len(self.events) >= EVENT_CACHE_LIMIT:
                self.events.clear()
            # Name, category, colour and the repeating args: serialized once per
            # distinct combination; protobuf merges concatenated messages, so
            # each slice only adds its track and its own args.
            event = self.pb.TrackEvent()
            event.type = self.begin_type
            iid, new = self._intern(self.names, item.name)
            event.name_iid = iid
            if new:
                entry = interned.event_names.add()
                entry.iid = iid
                entry.name = item.name
            event.categories.append(item.category)
            event.correlation_id_str = item.colour
            self._annotate(event, interned, item.static)
            static = event.SerializeToString()
            self.events[key] = static
        event = self.pb.TrackEvent()
        event.track_uuid = tid
        self._annotate(event, interned, item.dynamic)
        if item.flow is not None:
            flow_id, order, members = item.flow
            (event.terminating_flow_ids if order == members else event.flow_ids).append(flow_id)
        body = static + event.SerializeToString()
        if interned.ByteSize():
            packet.interned_data.CopyFrom(interned)
        # TracePacket.track_event is field 11, length-delimited (tag 0x5a).
        self._emit_bytes(packet.SerializeToString() + b"\x5a" + _varint(len(body)) + body)

    def _annotate(self, event: Any, interned: Any, args: tuple[tuple[str, Any], ...]) -> None:
        for key, value in args:
            if value is None:
                continue
            annotation = event.debug_annotations.add()
            name_iid, new = self._intern(self.arg_names, key)
            annotation.name_iid = name_iid
            if new:
                entry = interned.debug_annotation_names.add()
                entry.iid = name_iid
                entry.name = key
            if isinstance(value, bool):
                annotation.bool_value = value
            elif isinstance(value, int):
                annotation.int_value = value
            elif isinstance(value, float):
                annotation.double_value = value
            else:
                text = clean_text(value)
                if len(text) > 16:  # long, repeated strings (kernel names, frames)
                    value_iid, new = self._intern(self.strings, text)
                    annotation.string_value_iid = value_iid
                    if new:
                        entry = interned.debug_annotation_string_values.add()
                        entry.iid = value_iid
                        entry.str = text.encode("utf-8")
                else:
                    annotation.string_value = text

    def end(self, tid: int, ts: int) -> None:
        packet = self._packet(ts)
        packet.track_event.type = self.end_type
        packet.track_event.track_uuid = tid
        self._emit(packet)

    def close(self) -> None:
        self._flush()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _JsonSink(_Sink):
    """Chrome trace-event JSON, written event by event.

    Slices are complete (``X``) events. ``ts`` is microseconds since
    ``otherData.origin_ns`` (the whole second before the first event), ``dur``
    microseconds, both exact decimals of nanosecond values (``12.345678``);
    the exact absolute integers are in ``args.start_ns`` / ``args.dur_ns``.
    Why relative: readers (Perfetto included) parse ``ts`` as a double, which
    at absolute epoch nanoseconds (~1.7e15 us) keeps only a quarter of a
    microsecond, enough to make back-to-back kernels overlap and be dropped.
    Strings are written by ``json``
    (quotes, backslashes and control characters escaped) but non-ASCII text
    stays UTF-8: Perfetto's JSON importer keeps ``\\uXXXX`` escapes as
    literal text, so ``·`` written as ``\\u00b7`` would show as six
    characters.
    """

    def __init__(self, handle: IO[bytes], origin_ns: int, run_id: str) -> None:
        self.handle = handle
        self.origin = origin_ns
        self.buffer: list[str] = []
        self.first = True
        self.open: dict[int, list[tuple[int, _Slice]]] = {}
        self.pids: dict[int, int] = {}
        other = json_dumps({"run_id": clean_text(run_id), "origin_ns": origin_ns,
                            "time_base": "ts = (absolute ns - origin_ns) / 1000"})
        self.handle.write(f'{{"displayTimeUnit":"ns","otherData":{other},'
                          '"traceEvents":[\n'.encode())

    def _event(self, event: dict[str, Any]) -> None:
        self._write(json_dumps(event))

    def _write(self, text: str) -> None:
        self.buffer.append(text if self.first else ",\n" + text)
        self.first = False
        if len(self.buffer) >= BATCH_PACKETS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            self.handle.write("".join(self.buffer).encode("utf-8"))
            self.buffer.clear()

    def process(self, rank: _Rank) -> None:
        self._event({"ph": "M", "name": "process_name", "pid": rank.pid, "tid": 0,
                     "args": {"name": rank.name}})
        self._event({"ph": "M", "name": "process_sort_index", "pid": rank.pid, "tid": 0,
                     "args": {"sort_index": rank.rank}})

    def thread(self, rank: _Rank, tid: int, label: str) -> None:
        self.pids[tid] = rank.pid
        self._event({"ph": "M", "name": "thread_name", "pid": rank.pid, "tid": tid,
                     "args": {"name": label}})
        self._event({"ph": "M", "name": "thread_sort_index", "pid": rank.pid, "tid": tid,
                     "args": {"sort_index": tid % TIDS_PER_RANK}})

    def begin(self, tid: int, item: _Slice) -> None:
        kind = item.category if item.category in _JSON_COLOURS else "cpu"
        body = json_dumps({
            "ph": "X", "name": item.name, "cat": item.category,
            "pid": self.pids[tid], "tid": tid, "cname": _JSON_COLOURS[kind],
            "args": {**{key: clean_text(value) if isinstance(value, str) else value
                        for key, value in item.static + item.dynamic if value is not None},
                     "start_ns": item.start, "dur_ns": item.end - item.start},
        })
        # json writes floats with float.__repr__: write the exact decimals by hand.
        times = (f'{{"ts":{_micros(item.start - self.origin)},'
                 f'"dur":{_micros(item.end - item.start)},')
        self._write(times + body[1:])
        if item.flow is not None:
            flow_id, order, members = item.flow
            is_last = order == members
            phase = "f" if is_last else ("s" if order == 1 else "t")
            flow = {"ph": phase, "name": "collective", "cat": "collective", "id": flow_id,
                    "pid": self.pids[tid], "tid": tid}
            if is_last:
                flow["bp"] = "e"
            self._write(f'{{"ts":{_micros(item.start - self.origin)},' + json_dumps(flow)[1:])

    def end(self, tid: int, ts: int) -> None:
        """Complete events carry their end already."""

    def close(self) -> None:
        self._flush()
        self.handle.write(b"\n]}\n")


def _micros(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals (``-12.005``)."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def json_dumps(event: dict[str, Any]) -> str:
    """One event as compact JSON, UTF-8 kept as is (see :class:`_JsonSink` for why)."""
    return json.dumps(event, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                      default=str)
