"""One GPU's rows of an Nsight export as SQLite hands them over: in slice order, in batches.

Why SQLite sorts: a GPU's slices are numbered in (side, start, track, end
descending) order, and everything after the numbering (nesting, launches,
annotation context, the Parquet write) can then run on bounded batches in
that order (:mod:`.stream`). Sorted by DuckDB or numpy, the GPU's rows had to
be held whole first (0.8 GiB read, 1.8 GiB at the sort on a 713 MB export's
GPU); SQLite's sorter keeps a bounded amount in memory and spills the rest to
temporary files, and the ADBC driver streams the sorted result.

A GPU is two queries, one per *side*: its device work (kernels, copies,
fills, graph records: tracks per stream) and the CPU rows of the processes
that launch most on it (CUDA calls on their thread, NVTX events on their
thread or, for start/end ranges, per process and domain), each a
``union all`` of its activity tables over the union of their columns (NULL
where a table has none). Device work comes first, so a CPU row's slice id
is the number of device rows plus its position on its side. Rows that tie on
every sort key follow their table and row id, so the order is the same on
every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..trace_types import TraceError
from .nvtx import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END
from .read import NsysDatabase

#: The column of every side's rows that names its activity table (an :data:`.args.SOURCE_CODE`).
SOURCE_COLUMN = "src"
#: Its row id in that table (the last tie-breaker of the order).
ROW_ID_COLUMN = "_row"
#: CPU rows: the end the order and the duration use (an NVTX mark or unterminated
#: range ends where it starts); ``end`` stays as the export has it (the args read it).
SORT_END_COLUMN = "sort_end"
#: CPU rows: 0 on an NVTX start/end range (``nvtx_async`` tracks), 1 on a thread's row
#: (``thread`` tracks): tracks are numbered by kind, then key.
KIND_COLUMN = "kind_rank"
#: CPU rows: the track's key (the thread's ``globalTid``; process and domain of a
#: start/end range).
TRACK_KEY_COLUMN = "track_key"

_PID = "(((\"{col}\") >> 24) & 16777215)"
#: NVTX event types that become rows (a domain create only names its domain).
NVTX_ROW_TYPES = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END)


@dataclass(frozen=True)
class Table:
    """One activity table of the export: its key (:data:`.args.SOURCE_CODE`), base name
    and the columns read from it."""

    key: str
    base: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Side:
    """One side of a GPU as SQL over the export: ``rows`` in slice order, ``tracks``
    (one row per track with its slice count), ``correlations`` (device work only: the
    distinct correlation ids the GPU's rows carry), and the rows' Arrow schema."""

    rows: str
    tracks: str
    correlations: str | None
    schema: pa.Schema


def _union(db: NsysDatabase, tables: list[tuple[int, Table]], columns: list[str],
           extra: Callable[[Table, set[str]], list[str]],
           where: Callable[[Table, set[str]], str]) -> str | None:
    """``union all`` of every present table: its code, row id, ``columns`` (NULL where the
    table has no such column) and ``extra`` expressions; None when no table is present."""
    arms = []
    for code, table in tables:
        name = db.table(table.base)
        if name is None:
            continue
        present = db.columns(name)
        select = [f"{code} as {SOURCE_COLUMN}", f"rowid as {ROW_ID_COLUMN}"]
        select += [f'"{c}"' if c in present and c in table.columns else f'null as "{c}"'
                   for c in columns]
        select += extra(table, present)
        arms.append(f'select {", ".join(select)} from "{name}" where {where(table, present)}')
    return " union all ".join(arms) if arms else None


def _schema(columns: list[str], types: dict[str, pa.DataType], extra: list[str]) -> pa.Schema:
    names = [SOURCE_COLUMN, ROW_ID_COLUMN, *columns, *extra]
    return pa.schema([(name, types.get(name, pa.int64())) for name in names])


def _all_columns(tables: list[tuple[int, Table]]) -> list[str]:
    return list(dict.fromkeys(c for _code, table in tables for c in table.columns))


def gpu_side(db: NsysDatabase, tables: list[tuple[int, Table]], device: int,
             types: dict[str, pa.DataType]) -> Side | None:
    """Device ``device``'s work (``tables``: kernels, copies, fills, graph records)."""
    device = int(device)  # inlined: an int this module's caller read, never text
    columns = _all_columns(tables)
    union = _union(db, tables, columns, lambda table, present: [],
                   lambda table, present: f'"deviceId" = {device}' if "deviceId" in present
                   else "0")
    if union is None:
        return None
    return Side(
        rows=(f'select * from ({union}) order by "start" nulls last, "streamId" nulls last, '
              f'"end" desc nulls last, {SOURCE_COLUMN}, {ROW_ID_COLUMN}'),
        tracks=f'select "streamId", count(*) from ({union}) group by 1',
        correlations=(f'select distinct "correlationId" from ({union}) '
                      'where "correlationId" is not null'),
        schema=_schema(columns, types, []))


def cpu_side(db: NsysDatabase, tables: list[tuple[int, Table]],
             where: Callable[[set[str], bool], str], types: dict[str, pa.DataType]
             ) -> Side | None:
    """The CPU rows ``where(present columns, is NVTX)`` selects (CUDA calls, NVTX events)."""
    columns = _all_columns(tables)

    def extra(table: Table, present: set[str]) -> list[str]:
        end = '"end"' if "end" in present else "null"
        start = '"start"' if "start" in present else "null"
        tid = '"globalTid"' if "globalTid" in present else "null"
        if table.key != "nvtx":
            return [f"{end} as {SORT_END_COLUMN}", f"1 as {KIND_COLUMN}",
                    f"{tid} as {TRACK_KEY_COLUMN}"]
        event = '"eventType"' if "eventType" in present else "null"
        domain = '"domainId"' if "domainId" in present else "0"
        pid = _PID.format(col="globalTid") if "globalTid" in present else "null"
        return [f"coalesce({end}, {start}) as {SORT_END_COLUMN}",
                f"case when {event} = {NVTX_START_END} then 0 else 1 end as {KIND_COLUMN}",
                f"case when {event} = {NVTX_START_END} then ({pid} << 32) | "
                f"coalesce({domain}, 0) else {tid} end as {TRACK_KEY_COLUMN}"]

    union = _union(db, tables, columns, extra,
                   lambda table, present: where(present, table.key == "nvtx"))
    if union is None:
        return None
    return Side(
        rows=(f'select * from ({union}) order by "start" nulls last, {KIND_COLUMN}, '
              f'{TRACK_KEY_COLUMN} nulls last, {SORT_END_COLUMN} desc nulls last, '
              f'{SOURCE_COLUMN}, {ROW_ID_COLUMN}'),
        tracks=f"select {KIND_COLUMN}, {TRACK_KEY_COLUMN}, count(*) from ({union}) group by 1, 2",
        correlations=None,
        schema=_schema(columns, types, [SORT_END_COLUMN, KIND_COLUMN, TRACK_KEY_COLUMN]))


def cpu_rows_where(pids: list[int], other_pids: list[int] | None
                   ) -> Callable[[set[str], bool], str]:
    """The SQL filter of a GPU's CPU rows: those of ``pids`` (the processes that launch
    most on it) and, for the first GPU (``other_pids``: every process given a GPU), the
    rows of every other process and those without one; NVTX rows of the event types
    that become slices only."""
    def where(present: set[str], nvtx: bool) -> str:
        if "globalTid" not in present:
            return "1" if other_pids is not None else "0"
        pid = _PID.format(col="globalTid")
        mine = f"{pid} in ({', '.join(str(int(p)) for p in pids)})" if pids else "0"
        if other_pids is not None:
            others = ", ".join(str(int(p)) for p in other_pids)
            mine += ' or "globalTid" is null' + (f" or {pid} not in ({others})" if others
                                                  else " or 1")
        if nvtx:
            types = ", ".join(str(t) for t in NVTX_ROW_TYPES)
            mine = (f'({mine}) and "eventType" in ({types})' if "eventType" in present
                    else "0")
        return mine
    return where


def side_batches(db: NsysDatabase, side: Side, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """``side``'s rows in slice order, ``batch_rows`` at a time, cast to its schema."""
    def typed(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            return batch.cast(side.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TraceError("invalid_sqlite", "a column holds values of an unexpected "
                             f"type: {exc}", "export the report again with "
                             "`nsys export --type sqlite`") from exc
    yield from db.stream(side.rows, typed, batch_rows)
