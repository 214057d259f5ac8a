"""Nsight Systems SQLite exports into the same lake tables Kineto traces fill.

One export becomes one trace per GPU (one rank per GPU): an export of a
node with 8 GPUs gives 8 ranks of one run, and a run may be many exports,
one per node. Ranks are ``rank hint + GPU index``: the hint is the rank in
the file name (``rank8.sqlite``, ``node_rank-8.sqlite``), else 0, and GPUs
are numbered in CUDA device order, so one file per node named for its
first rank, or one file per rank, both give global ranks. Two files that
would give the same rank are reported as a duplicate, never merged.

What lands where, so every model, mart and chart works unchanged:

* ``CUPTI_ACTIVITY_KIND_KERNEL`` → ``slices`` category ``kernel`` on a GPU
  track per (device, stream), named by the demangled name (as Kineto does;
  the short name is in ``args."short name"``). NCCL kernels are kernels
  whose name says NCCL, classified as communication by the models' seed.
* ``MEMCPY``/``MEMSET`` → ``gpu_memcpy``/``gpu_memset``, named as Kineto
  names them (``Memcpy DtoD (Device -> Device)``, ``Memset (Device)``).
* ``RUNTIME``/``DRIVER`` → ``cuda_runtime``/``cuda_driver`` on the calling
  thread's track (the ``_v7000`` version suffix dropped, as Kineto shows
  them), and an ``ac2g`` flow from the call to every GPU record with its
  ``correlationId`` (one per kernel of a CUDA graph launch, too).
* ``NVTX_EVENTS`` push/pop ranges → category ``nvtx`` on the thread's track
  (so kernels launched inside them nest like Kineto's ``cpu_op`` frames);
  start/end ranges, which may cross threads and overlap, on one track per
  process and domain; marks as instants. Text is ``text``, else
  ``StringIds[textId]``; domain, event type and payload stay in ``args``.
* ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` (whole-graph records, when the
  capture has them) → ``cuda_graph`` on the GPU track.
* Processes and threads from ``PROCESSES``/``ThreadNames``; GPU details
  from ``TARGET_INFO_GPU``/``TARGET_INFO_CUDA_DEVICE`` into
  ``traces.device_properties``.

CPU rows go to the rank of the GPU their process launches most work on;
processes that launch nothing (launchers, data loaders) go to the first
rank, so nothing in the file is dropped. Times are put on the UTC clock
(``TARGET_INFO_SESSION_START_TIME``: ``utcEpochNs - systemClockNs`` is
``traces.base_time_ns``), so exports of different nodes line up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..memory import release_free_memory
from ..name_match import per_name
from ..nesting import nest_slices
from ..trace_types import ParsedTrace, TraceError, TraceFile, display_path
from .args import ROW_COLUMN, SOURCE_CODE, DeferredArgs
from .names import NAME_IDS, slice_names
from .nvtx import NVTX_DOMAIN_CREATE, NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END
from .owned import owned
from .read import NsysDatabase

FILE_FORMAT = "nsys_sqlite"
LAYOUT = "nsys"
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


#: Columns read as something other than integers (every other column is int64).
_COLUMN_TYPES = {"text": pa.string(), "jsonText": pa.string(), "doubleValue": pa.float64(),
                 "floatValue": pa.float64()}


@dataclass(frozen=True)
class _Source:
    """One activity table of the export and the columns we read from it."""

    base: str
    columns: tuple[str, ...]

    @property
    def schema(self) -> pa.Schema:
        """The columns' types, whatever SQLite held: the ADBC driver types a column
        by its values, so a TEXT column that is all NULL (NVTX ``text`` in exports
        that name ranges by ``textId``) or one this export lacks arrives as int64."""
        return pa.schema([(c, _COLUMN_TYPES.get(c, pa.int64())) for c in self.columns])


_KERNEL = _Source("CUPTI_ACTIVITY_KIND_KERNEL", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
    "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
    "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "graphId",
    "graphNodeId", "launchType"))
_MEMCPY = _Source("CUPTI_ACTIVITY_KIND_MEMCPY", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
    "srcKind", "dstKind", "graphNodeId"))
_MEMSET = _Source("CUPTI_ACTIVITY_KIND_MEMSET", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "value",
    "memKind", "graphNodeId"))
_GRAPH = _Source("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"))
_RUNTIME = _Source("CUPTI_ACTIVITY_KIND_RUNTIME", (
    "start", "end", "globalTid", "correlationId", "nameId", "returnValue"))
_DRIVER = _Source("CUPTI_ACTIVITY_KIND_DRIVER", (
    "start", "end", "globalTid", "correlationId", "nameId", "returnValue"))
_NVTX = _Source("NVTX_EVENTS", (
    "start", "end", "eventType", "rangeId", "category", "text", "globalTid", "endGlobalTid",
    "textId", "domainId", "uint64Value", "int64Value", "doubleValue", "uint32Value",
    "int32Value", "floatValue", "jsonText"))

def _read(db: NsysDatabase, source: _Source, where: Callable[[set[str]], str] | None = None
          ) -> pa.Table | None:
    """The table's columns we use (NULL for those this export lacks); None if absent.

    ``where(present columns)`` gives a SQL filter (built from column names and
    ints this module read, never from text), so that SQLite hands over only
    the rows of one GPU. The rows come as Arrow record batches and are cast
    batch by batch, so no table of the whole export is held twice.
    """
    table = db.table(source.base)
    if table is None:
        return None
    present = db.columns(table)
    select = ", ".join(f'"{c}"' if c in present else f'null as "{c}"' for c in source.columns)
    sql = f'select {select} from "{table}"'
    if where is not None:
        sql += f" where {where(present)}"
    return db.query_batches(sql, lambda batch: _typed(batch, source.schema))


def _typed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``schema``'s types, so the SQL below binds one way on every export."""
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TraceError("invalid_sqlite", f"a column holds values of an unexpected type: {exc}",
                         "export the report again with `nsys export --type sqlite`") from exc


#: GPU activity tables, by the key the mapping registers them under.
_GPU_SOURCES = (("kernel", _KERNEL), ("memcpy", _MEMCPY), ("memset", _MEMSET),
                ("graph", _GRAPH))
#: CPU activity tables (a thread's calls and ranges), by their key.
_CPU_SOURCES = (("runtime", _RUNTIME), ("driver", _DRIVER), ("nvtx", _NVTX))
#: The NVTX event types that become rows (domain creates only name domains).
_NVTX_ROW_TYPES = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END)


def read_shared(db: NsysDatabase) -> dict[str, pa.Table]:
    """What every GPU's rows need: strings, names, clocks, GPU details, NVTX domains,
    which activity tables exist, and the work counts that decide the GPUs and the
    GPU each process belongs to (a few rows per process and device, counted by SQLite)."""
    tables: dict[str, pa.Table] = {}
    tables["strings"] = db.query('select id, value from "StringIds"')
    if "PROCESSES" in db.tables:
        tables["processes"] = db.query('select globalPid, pid, name from "PROCESSES"')
    if "ThreadNames" in db.tables:
        tables["thread_names"] = db.query('select nameId, globalTid from "ThreadNames"')
    if "TARGET_INFO_SESSION_START_TIME" in db.tables:
        tables["session"] = db.query(
            'select utcEpochNs, systemClockNs from "TARGET_INFO_SESSION_START_TIME"')
    gpu = db.table("TARGET_INFO_GPU")
    cuda_device = db.table("TARGET_INFO_CUDA_DEVICE")
    if gpu is not None:
        tables["gpu_info"] = db.query(f'select * from "{gpu}"')
    if cuda_device is not None:
        tables["cuda_device"] = db.query(f'select * from "{cuda_device}"')
    if "META_DATA_EXPORT" in db.tables:
        tables["export_meta"] = db.query('select name, value from "META_DATA_EXPORT"')
    counts = []
    for _key, source in _GPU_SOURCES[:3]:  # graph records are not counted as work
        name = db.table(source.base)
        if name is None:
            continue
        present = db.columns(name)
        device = '"deviceId"' if "deviceId" in present else "null"
        pid = _PID.format(col='"globalPid"') if "globalPid" in present else "null"
        counts.append(db.query(
            f'select cast({device} as integer) as device, cast({pid} as integer) as pid, '
            f'count(*) as n from "{name}" group by 1, 2'))
    tables["gpu_work"] = pa.concat_tables(
        [_typed_table(c, _WORK_SCHEMA) for c in counts] or [_WORK_SCHEMA.empty_table()])
    nvtx = _read(db, _NVTX, lambda present: f'"eventType" = {NVTX_DOMAIN_CREATE}'
                 if "eventType" in present else "0")
    tables["nvtx_domains"] = nvtx if nvtx is not None else _NVTX.schema.empty_table()
    tables["present"] = pa.table({"key": [key for key, source in (*_GPU_SOURCES, *_CPU_SOURCES)
                                          if db.table(source.base) is not None]})
    return tables


_WORK_SCHEMA = pa.schema([("device", pa.int64()), ("pid", pa.int64()), ("n", pa.int64())])


def _typed_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([_typed(b, schema) for b in table.to_batches()], schema)


def read_gpu(db: NsysDatabase, device: int, pids: list[int],
             other_pids: list[int] | None) -> dict[str, pa.Table]:
    """One GPU's activity tables: its device work, and the CPU rows of ``pids`` (the
    processes that launch most on it). ``other_pids`` is given for the first GPU
    only: the CPU rows of every process not in it (those that launch nothing, and
    rows without a process) belong there too."""
    device = int(device)  # inlined below: an int this module read, never text
    tables: dict[str, pa.Table] = {}
    for key, source in _GPU_SOURCES:
        table = _read(db, source, lambda present: f'"deviceId" = {device}'
                      if "deviceId" in present else "0")
        if table is not None:
            tables[key] = table

    def cpu_rows(present: set[str], nvtx: bool) -> str:
        if "globalTid" not in present:
            return "1" if other_pids is not None else "0"
        pid = _PID.format(col='"globalTid"')
        mine = f"{pid} in ({', '.join(str(int(p)) for p in pids)})" if pids else "0"
        if other_pids is not None:
            others = ", ".join(str(int(p)) for p in other_pids)
            mine += ' or "globalTid" is null' + (f" or {pid} not in ({others})" if others
                                                  else " or 1")
        if nvtx:
            types = ", ".join(str(t) for t in _NVTX_ROW_TYPES)
            mine = (f"({mine}) and \"eventType\" in ({types})" if "eventType" in present
                    else "0")
        return mine

    for key, source in _CPU_SOURCES:
        table = _read(db, source, lambda present, nvtx=key == "nvtx": cpu_rows(present, nvtx))
        if table is not None:
            tables[key] = table
    return tables


# ---- the mapping, in DuckDB over the Arrow tables --------------------------------------

_PID = "((({col}) >> 24) & 16777215)"
_TID = "(({col}) & 16777215)"


def _empty_like(source: _Source) -> pa.Table:
    return source.schema.empty_table()


def _source_columns(key: str, alias: str) -> str:
    """The columns that point a slice back to its source row (for its args)."""
    return f"{SOURCE_CODE[key]}::tinyint as src, {alias}.{ROW_COLUMN} as src_row"


def _gpu_slices_sql(tables: dict[str, pa.Table]) -> str:
    """Kernels, copies, fills and graph records: one row each, still device-wide."""
    parts = [f"""
        select 'kernel' as category, k.start, k."end", k.deviceId as device,
            k.streamId as stream, k.correlationId as correlation,
            {_PID.format(col='k.globalPid')} as pid,
            {_source_columns('kernel', 'k')}
        from kernel as k"""]
    parts.append(f"""
        select 'gpu_memcpy', m.start, m."end", m.deviceId, m.streamId, m.correlationId,
            {_PID.format(col='m.globalPid')},
            {_source_columns('memcpy', 'm')}
        from memcpy as m""")
    parts.append(f"""
        select 'gpu_memset', m.start, m."end", m.deviceId, m.streamId, m.correlationId,
            {_PID.format(col='m.globalPid')},
            {_source_columns('memset', 'm')}
        from memset as m""")
    if "graph" in tables:
        parts.append(f"""
            select 'cuda_graph', g.start, g."end", g.deviceId, g.streamId, g.correlationId,
                {_PID.format(col='g.globalPid')},
                {_source_columns('graph', 'g')}
            from graph as g""")
    return " union all ".join(parts)


def _cpu_slices_sql(tables: dict[str, pa.Table]) -> str:
    """Runtime and driver calls and NVTX events, with the track each belongs on.

    ``event_type`` is NVTX's, NULL on calls: the annotation context tells push/pop
    ranges by it before the args (which hold it too) are built."""
    parts = []
    for key, category in (("runtime", "cuda_runtime"), ("driver", "cuda_driver")):
        if key not in tables:
            continue
        parts.append(f"""
            select '{category}' as category, 'X' as phase, r.start, r."end",
                {_PID.format(col='r.globalTid')} as pid, r.globalTid as track_key,
                'thread' as track_kind, r.correlationId as correlation,
                {_source_columns(key, 'r')}, null::bigint as event_type
            from {key} as r""")
    parts.append(f"""
        select
            case when n.eventType = {NVTX_MARK} then 'nvtx_mark' else 'nvtx' end as category,
            case when n.eventType = {NVTX_MARK} then 'i' else 'X' end as phase,
            n.start, coalesce(n."end", n.start) as "end",
            {_PID.format(col='n.globalTid')} as pid,
            case when n.eventType = {NVTX_START_END}
                then ({_PID.format(col='n.globalTid')} << 32) | coalesce(n.domainId, 0)
                else n.globalTid end as track_key,
            case when n.eventType = {NVTX_START_END} then 'nvtx_async' else 'thread' end
                as track_kind,
            null::bigint as correlation,
            {_source_columns('nvtx', 'n')}, n.eventType as event_type
        from nvtx as n
        where n.eventType in ({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END})""")
    return " union all ".join(parts)


def _register(con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """One GPU's activity tables (``tables``, with the shared ones) as DuckDB views' inputs;
    returns the activity tables as registered, each numbered by :data:`ROW_COLUMN`."""
    sources: dict[str, pa.Table] = {}
    for key, source in (("kernel", _KERNEL), ("memcpy", _MEMCPY), ("memset", _MEMSET),
                        ("graph", _GRAPH), ("runtime", _RUNTIME), ("driver", _DRIVER),
                        ("nvtx", _NVTX)):
        if key not in tables and key in ("graph", "driver"):
            continue
        table = tables.get(key, _empty_like(source))
        sources[key] = table.append_column(
            ROW_COLUMN, pa.array(np.arange(table.num_rows, dtype=np.int64)))
        con.register(key, sources[key])
    return sources


def args_lookups(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The name tables the args show (:data:`ingest.nsys.args.ARGS_SQL`), as ``id, value``:
    ``strings`` (StringIds) and ``domains`` (each NVTX domain's name, from its create
    event's text, else the string it names)."""
    with duckdb.connect() as con:
        con.register("strings", tables["strings"])
        con.register("nvtx_domains", tables["nvtx_domains"])
        domains = con.sql(f"""
            select coalesce(domainId, 0) as id, min(coalesce(text, texts.value)) as value
            from nvtx_domains left join strings as texts on nvtx_domains.textId = texts.id
            where eventType = {NVTX_DOMAIN_CREATE} group by 1""").to_arrow_table()
    return {"strings": tables["strings"], "domains": domains}


def _base_time_ns(tables: dict[str, pa.Table]) -> int:
    session = tables.get("session")
    if session is None or session.num_rows == 0:
        return 0
    utc = session.column("utcEpochNs")[0].as_py()
    system = session.column("systemClockNs")[0].as_py()
    return int(utc) - int(system) if utc is not None and system is not None else 0


def _device_properties(tables: dict[str, pa.Table], device: int) -> str | None:
    """Kineto-shaped ``deviceProperties`` for one CUDA device, when the export has them."""
    gpus = tables.get("gpu_info")
    if gpus is None or gpus.num_rows == 0:
        return None
    gpu_rows = gpus.to_pylist()
    links = tables.get("cuda_device")
    gpu_id = None
    if links is not None and {"cudaId", "gpuId"} <= set(links.column_names):
        for row in links.to_pylist():
            if row["cudaId"] == device:
                gpu_id = row["gpuId"]
    match = [r for r in gpu_rows if r.get("id") == gpu_id] if gpu_id is not None else []
    if not match and "cuDevice" in gpus.column_names:
        match = [r for r in gpu_rows if r.get("cuDevice") == device]
    if not match:
        return None
    row = match[0]
    props = {"id": device, "name": row.get("name"), "totalGlobalMem": row.get("totalMemory"),
             "numSms": row.get("smCount"), "busLocation": row.get("busLocation"),
             "chipName": row.get("chipName"), "memoryBandwidth": row.get("memoryBandwidth")}
    return json.dumps([props], default=str)


@dataclass(frozen=True)
class ExportPlan:
    """What every GPU of one export shares, decided once before any GPU is read:
    the small tables (:func:`read_shared`), process and thread names, the GPUs in
    order, the GPU each process belongs to, the UTC offset and the ranks."""

    shared: dict[str, pa.Table]
    names: _Names
    devices: list[int]
    #: ``(pid, device)``: the GPU each process launches most work on.
    process_device: list[tuple[int, int]]
    base_ns: int
    first_rank: int
    world: int | None


def plan_export(db: NsysDatabase, source: TraceFile) -> ExportPlan:
    """Read what the GPUs share and decide the GPUs; raises :class:`TraceError` for an
    export without GPU activity."""
    shared = read_shared(db)
    con = duckdb.connect()
    try:
        con.register("strings", shared["strings"])
        names = _thread_and_process_names(con, shared)
        con.register("gpu_work", shared["gpu_work"])
        devices = [row[0] for row in con.execute(
            "select distinct device from gpu_work where device is not null order by 1"
        ).fetchall()]
        if not devices:
            raise TraceError("empty", "the export has no CUDA kernels, copies or fills",
                             "profile with `nsys profile --trace=cuda,nvtx` and export again")
        # The GPU each process launches most work on; ties go to the lower device.
        process_device = con.execute("""
            select pid, arg_max(device, n) as device from (
                select pid, device, sum(n) * 1000000 - device as n
                from gpu_work where pid is not null group by 1, 2
            ) group by 1 order by 1""").fetchall()
    finally:
        con.close()
    return ExportPlan(
        shared=shared, names=names, devices=devices, process_device=process_device,
        base_ns=_base_time_ns(shared),
        first_rank=source.rank_hint if source.rank_hint is not None else 0,
        world=len(devices) if source.rank_hint is None else None)


def parse_gpu(db: NsysDatabase, plan: ExportPlan, index: int, source: TraceFile, *,
              trace_id: str, content_hash: str, ingested_at: object) -> NsysTrace:
    """The lake rows of the export's ``index``-th GPU (its activity read from SQLite
    now, filtered there: :func:`read_gpu`), with :attr:`NsysTrace.args` open on its
    activity tables: the caller writes the rows, then closes it."""
    device = plan.devices[index]
    mapped = [pid for pid, _device in plan.process_device]
    pids = [pid for pid, owner in plan.process_device if owner == device]
    tables = {**plan.shared, **read_gpu(db, device, pids, mapped if index == 0 else None)}
    con = duckdb.connect()
    try:
        sources = _register(con, tables)
        # Views over the Arrow tables, sorted with numbers only: names come after.
        con.execute(f"create temp view gpu as {_gpu_slices_sql(tables)}")
        con.execute(f"create temp view cpu_device as select *, {int(device)} as device "
                    f"from ({_cpu_slices_sql(tables)})")
        rows, track_rows = _sorted_rows(con, device, plan.base_ns)
    finally:
        # Closed before the rows are nested: the database's memory (the sort's, ~0.8 GiB
        # on a 713 MB export's GPU) goes back only when it closes.
        con.close()
    release_free_memory()
    names = slice_names(sources, SOURCE_CODE, tables["strings"],
                        rows.column("src").to_numpy(), rows.column("src_row").to_numpy())
    part = _one_gpu(rows, names, track_rows, source, device, plan.first_rank + index,
                    plan.world, plan.base_ns, plan.names, trace_id=trace_id,
                    content_hash=content_hash,
                    ingested_at=ingested_at,
                    device_properties=_device_properties(plan.shared, device))
    del rows, names
    # The activity tables stay, read by the args of each write batch.
    part.args = DeferredArgs(sources, args_lookups(tables), *part.args_source)
    part.args_source = None
    del tables, sources
    release_free_memory()  # DuckDB's working memory, before the lake writer's arrays
    return part


#: Slice columns that hold one value per GPU (:func:`held_back_columns`).
CONSTANT_SLICE_COLUMNS = ("run_id", "rank", "trace_id")
#: Slice columns Nsight has no values for (Kineto's ids, collectives and messages).
NULL_SLICE_COLUMNS = ("external_id", "collective_name", "process_group_name",
                      "process_group_desc", "process_group_ranks", "group_size",
                      "in_msg_nelems", "out_msg_nelems", "dtype")
#: The columns an Nsight GPU's ``slices`` are held with: the parsed slices' but the
#: constant and all-NULL ones, which cost 4.4 M rows x 12 columns (~450 MiB per GPU of
#: a 713 MB export) for no value; each write group gets them (:func:`held_back_columns`).
#: ``name`` is held as indices into the GPU's distinct names (:mod:`.names`).
HELD_SLICES = pa.schema([
    pa.field("name", NAME_IDS) if field.name == "name" else field
    for field in schema.PARSED_SLICES
    if field.name not in CONSTANT_SLICE_COLUMNS + NULL_SLICE_COLUMNS])


def held_back_columns(run_id: str, rank: int, trace_id: str, rows: int) -> dict[str, pa.Array]:
    """The columns :data:`HELD_SLICES` leaves out, for ``rows`` slices of one GPU."""
    columns = {"run_id": pa.repeat(pa.scalar(run_id, pa.string()), rows),
               "rank": pa.repeat(pa.scalar(rank, pa.int64()), rows),
               "trace_id": pa.repeat(pa.scalar(trace_id, pa.string()), rows)}
    types = schema.PARSED_SLICES
    return columns | {name: pa.nulls(rows, types.field(name).type) for name in NULL_SLICE_COLUMNS}


@dataclass
class NsysTrace(ParsedTrace):
    """One GPU's :class:`ParsedTrace` whose ``slices`` hold :data:`HELD_SLICES` with a
    stand-in ``args`` (:func:`stand_in_args`); the real text and the held-back columns
    come as the lake file is written (:func:`ingest.nsys.write.write_gpu_tmp`)."""

    args: DeferredArgs | None = None
    #: ``(src, src_row)`` per slice until :attr:`args` is made from them.
    args_source: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class _Names:
    processes: dict[int, str]
    threads: dict[int, str]


def _thread_and_process_names(con: duckdb.DuckDBPyConnection,
                              tables: dict[str, pa.Table]) -> _Names:
    processes: dict[int, str] = {}
    if "processes" in tables:
        for row in tables["processes"].to_pylist():
            if row["pid"] is not None:
                processes[int(row["pid"])] = row["name"]
    threads: dict[int, str] = {}
    if "thread_names" in tables:
        con.register("thread_names", tables["thread_names"])
        for global_tid, name in con.execute(
                "select globalTid, value from thread_names "
                "inner join strings on thread_names.nameId = strings.id").fetchall():
            threads[int(global_tid)] = name
    return _Names(processes, threads)


def _sorted_rows(con: duckdb.DuckDBPyConnection, device: int,
                 base_ns: int) -> tuple[pa.Table, list[tuple]]:
    """One GPU's device work and its processes' CPU rows, in slice order, each with its
    track; and the tracks (kind, key, pid, id, slice count) by id."""
    # The GPU's device work (side 0) then its processes' CPU rows (side 1); one
    # track per stream, per thread, and per process and domain for start/end ranges.
    device = int(device)  # inlined below: a view takes no bind parameters
    con.execute(f"""
        create or replace temp view picked as
        select 0 as side, category, 'X' as phase, start, "end", correlation, device, stream,
            src, src_row, null::bigint as event_type, 'gpu' as track_kind,
            stream as track_key, device as pid
        from gpu where device = {device}
        union all
        select 1, category, phase, start, "end", correlation, null, null, src, src_row,
            event_type, track_kind, track_key, pid
        from cpu_device where device = {device}""")
    con.execute("""
        create or replace temp table tracks as
        select track_kind, track_key, any_value(pid) as pid,
            row_number() over (order by min(side), track_kind, track_key) - 1 as track_id,
            count(*) as slice_count
        from picked group by 1, 2""")
    rows = con.sql("""
        select picked.side, picked.category, picked.phase, picked.start + $base as ts,
            greatest(picked."end" - picked.start, 0) as dur, picked.correlation,
            picked.device, picked.stream, picked.src, picked.src_row,
            picked.event_type, tracks.track_id
        from picked inner join tracks using (track_kind, track_key)
        order by picked.side, picked.start, tracks.track_id, picked."end" desc
        """, params={"base": base_ns}).to_arrow_table()
    track_rows = con.execute("select * from tracks order by track_id").fetchall()
    return rows, track_rows


def _one_gpu(rows: pa.Table, slice_name: pa.ChunkedArray, track_rows: list[tuple],
             source: TraceFile, device: int,
             rank: int, world: int | None, base_ns: int, names: _Names, *, trace_id: str,
             content_hash: str, ingested_at: object,
             device_properties: str | None) -> NsysTrace:
    """The lake rows of one GPU from its sorted rows (:func:`_sorted_rows`) and their names
    (:func:`.names.slice_names`)."""
    n = rows.num_rows
    run_id = source.run_id
    track = rows.column("track_id").to_numpy().astype(np.int64)
    ts = rows.column("ts").to_numpy().astype(np.int64)
    dur = rows.column("dur").to_numpy().astype(np.int64)
    nested = nest_slices(track, ts, dur)
    slice_id = np.arange(n, dtype=np.int64)
    slices = pa.table({
        "slice_id": pa.array(slice_id),
        "ts": pa.array(ts),
        "dur": pa.array(dur),
        "phase": owned(rows.column("phase")),
        "category": owned(rows.column("category")),
        "name": slice_name,
        "track_id": pa.array(track),
        "depth": pa.array(nested.depth),
        "parent_id": pa.array(nested.parent, mask=nested.parent < 0),
        "is_partial_overlap": pa.array(nested.partial),
        "correlation": owned(rows.column("correlation")),
        "device": owned(rows.column("device")),
        "stream": owned(rows.column("stream")),
        "args": stand_in_args(rows.column("event_type")),
    }).cast(HELD_SLICES)
    args_source = (rows.column("src").to_numpy().astype(np.int8),
                   rows.column("src_row").to_numpy().astype(np.int64))

    flows = _launch_flows(rows, ts, run_id, rank, trace_id)
    threads, processes = _tracks(track_rows, device, names, run_id, rank, trace_id)
    steps = sorted({int(m.group(1)) for name in _cpu_names(rows.column("category"), slice_name)
                    if (m := _PROFILER_STEP.match(name))})
    start = int(ts.min()) if n else None
    end = int((ts + dur).max()) if n else None
    traces = pa.Table.from_pylist([{
        "run_id": run_id, "trace_id": trace_id, "rank": rank, "world_size": world,
        "iteration": source.iteration_hint,
        "min_profiler_step": steps[0] if steps else None,
        "max_profiler_step": steps[-1] if steps else None,
        "path": display_path(source.path), "file_format": FILE_FORMAT, "layout": LAYOUT,
        "size_bytes": source.size_bytes, "uncompressed_bytes": source.size_bytes,
        "mtime_ns": source.mtime_ns, "content_hash": content_hash, "engine": "native",
        "schema_version": None, "base_time_ns": base_ns, "trace_start_ns": start,
        "trace_end_ns": end, "event_count": n, "slice_count": n,
        "flow_count": flows.num_rows, "unpaired_flow_events": 0,
        "partial_overlap_count": int(nested.partial.sum()), "backend": None,
        "host_name": None, "kineto_trace_id": None,
        "distributed_info": json.dumps({"rank": rank, "nsys_device": device}),
        "device_properties": device_properties,
        # Nsight records no operator shapes: no FLOP model reads its ops.
        "has_op_shapes": False, "ingested_at": ingested_at,
        "lake_format": schema.LAKE_FORMAT,
    }], schema=schema.TRACES)
    return NsysTrace(
        trace_id=trace_id, rank=rank, iteration=source.iteration_hint,
        profiler_steps=tuple(steps),
        tables={"slices": slices, "flows": flows, "threads": threads,
                "processes": processes, "process_groups": schema.PROCESS_GROUPS.empty_table(),
                "traces": traces},
        args_source=args_source,
    )


def stand_in_args(event_type: pa.ChunkedArray) -> pa.ChunkedArray:
    """``args`` as the slice context reads it before the real text exists: only NVTX's
    ``event type`` (which tells push/pop ranges, ingest/annotation_context.py), NULL
    on every other row; :class:`DeferredArgs` writes the whole text into the lake."""
    text = pc.cast(event_type, pa.string())
    return pc.binary_join_element_wise('{"event type": ', text, "}", "")


def _cpu_names(category: pa.ChunkedArray, names: pa.ChunkedArray) -> list[str]:
    """Names of NVTX ranges that may be profiler steps (filtered in Arrow, not Python)."""
    keep = pc.and_(pc.equal(category, "nvtx"),
                   per_name(names, lambda text: pc.starts_with(text, "ProfilerStep#")))
    return names.filter(pc.fill_null(keep, False)).cast(pa.string()).to_pylist()


def _launch_flows(rows: pa.Table, ts: np.ndarray, run_id: str, rank: int,
                  trace_id: str) -> pa.Table:
    """``ac2g`` flows: the CUDA call with a correlation id → each GPU record with it.

    When several calls share an id (a runtime call and the driver call under
    it), the runtime call launches: it is the one Kineto links.
    """
    con = duckdb.connect()
    try:
        con.register("rows", rows.select(["side", "category", "correlation"]).append_column(
            "slice_id", pa.array(np.arange(rows.num_rows, dtype=np.int64))).append_column(
            "ts", pa.array(ts)))
        table = con.sql("""
            with ranked as (
                select correlation, slice_id as slice_out, ts as ts_out,
                    row_number() over (
                        partition by correlation
                        order by category != 'cuda_runtime', ts, slice_id
                    ) as preference
                from rows
                where side = 1 and correlation is not null and correlation != 0
            ),
            launches as (
                select * from ranked where preference = 1
            )
            select row_number() over (order by gpu.slice_id) - 1 as flow_id,
                launches.slice_out, gpu.slice_id as slice_in, launches.ts_out,
                gpu.ts as ts_in
            from rows as gpu inner join launches using (correlation)
            where gpu.side = 0
            order by gpu.slice_id""").to_arrow_table()
    finally:
        con.close()
    k = table.num_rows
    return pa.table({
        "run_id": pa.array([run_id] * k, pa.string()),
        "rank": pa.array(np.full(k, rank, dtype=np.int64)),
        "trace_id": pa.array([trace_id] * k, pa.string()),
        "flow_id": table.column("flow_id"),
        "category": pa.array(["ac2g"] * k, pa.string()),
        "slice_out": table.column("slice_out"),
        "slice_in": table.column("slice_in"),
        "ts_out": table.column("ts_out"),
        "ts_in": table.column("ts_in"),
    }).cast(schema.FLOWS)


def _tracks(track_rows: list[tuple], device: int, names: _Names, run_id: str, rank: int,
            trace_id: str) -> tuple[pa.Table, pa.Table]:
    threads = []
    pids: dict[str, str | None] = {}
    for kind, key, pid, track_id, count in track_rows:
        if kind == "gpu":
            pid_s, tid_s, name = str(device), f"stream {key}", f"stream {key}"
            pids.setdefault(pid_s, f"GPU {device}")
        elif kind == "nvtx_async":
            pid_s = str(pid)
            tid_s = f"nvtx domain {int(key) & 0xFFFFFFFF}"
            name = f"NVTX start/end ranges (domain {int(key) & 0xFFFFFFFF})"
            pids.setdefault(pid_s, names.processes.get(int(pid)))
        else:
            pid_s, tid_s = str(pid), str(int(key) & 0xFFFFFF)
            name = names.threads.get(int(key))
            pids.setdefault(pid_s, names.processes.get(int(pid)))
        threads.append({"run_id": run_id, "rank": rank, "trace_id": trace_id,
                        "track_id": track_id, "pid": pid_s, "tid": tid_s, "thread_name": name,
                        "thread_sort_index": None, "is_gpu": kind == "gpu",
                        "slice_count": count})
    processes = [{"run_id": run_id, "rank": rank, "trace_id": trace_id, "pid": pid,
                  "process_name": name, "process_labels": None, "process_sort_index": None}
                 for pid, name in pids.items()]
    return (pa.Table.from_pylist(threads, schema=schema.THREADS),
            pa.Table.from_pylist(processes, schema=schema.PROCESSES))
