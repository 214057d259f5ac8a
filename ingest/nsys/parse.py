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
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..trace_types import TraceError, TraceFile
from .nvtx import NVTX_DOMAIN_CREATE
from .read import NsysDatabase

FILE_FORMAT = "nsys_sqlite"
LAYOUT = "nsys"


#: Columns read as something other than integers (every other column is int64).
COLUMN_TYPES = {"text": pa.string(), "jsonText": pa.string(), "doubleValue": pa.float64(),
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
        return pa.schema([(c, COLUMN_TYPES.get(c, pa.int64())) for c in self.columns])


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
GPU_SOURCES = (("kernel", _KERNEL), ("memcpy", _MEMCPY), ("memset", _MEMSET),
                ("graph", _GRAPH))
#: CPU activity tables (a thread's calls and ranges), by their key.
CPU_SOURCES = (("runtime", _RUNTIME), ("driver", _DRIVER), ("nvtx", _NVTX))


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
    for _key, source in GPU_SOURCES[:3]:  # graph records are not counted as work
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
    tables["present"] = pa.table({"key": [key for key, source in (*GPU_SOURCES, *CPU_SOURCES)
                                          if db.table(source.base) is not None]})
    return tables


_PID = "((({col}) >> 24) & 16777215)"
_WORK_SCHEMA = pa.schema([("device", pa.int64()), ("pid", pa.int64()), ("n", pa.int64())])


def _typed_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([_typed(b, schema) for b in table.to_batches()], schema)


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


def device_properties(tables: dict[str, pa.Table], device: int) -> str | None:
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


#: Slice columns that hold one value per GPU (:func:`held_back_columns`).
CONSTANT_SLICE_COLUMNS = ("run_id", "rank", "trace_id")
#: Slice columns Nsight has no values for (Kineto's ids, collectives and messages).
NULL_SLICE_COLUMNS = ("external_id", "collective_name", "process_group_name",
                      "process_group_desc", "process_group_ranks", "group_size",
                      "in_msg_nelems", "out_msg_nelems", "dtype")


def held_back_columns(run_id: str, rank: int, trace_id: str, rows: int) -> dict[str, pa.Array]:
    """The slice columns constant or NULL on one GPU, for ``rows`` slices: the loader
    carries a GPU's slices without them and adds them as each group is written."""
    columns = {"run_id": pa.repeat(pa.scalar(run_id, pa.string()), rows),
               "rank": pa.repeat(pa.scalar(rank, pa.int64()), rows),
               "trace_id": pa.repeat(pa.scalar(trace_id, pa.string()), rows)}
    types = schema.PARSED_SLICES
    return columns | {name: pa.nulls(rows, types.field(name).type) for name in NULL_SLICE_COLUMNS}


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


def stand_in_args(event_type: pa.ChunkedArray) -> pa.ChunkedArray:
    """``args`` as the slice context reads it before the real text exists: only NVTX's
    ``event type`` (which tells push/pop ranges, ingest/annotation_context.py), NULL
    on every other row; the lake gets the whole text (:class:`.args.ArgsText`)."""
    text = pc.cast(event_type, pa.string())
    return pc.binary_join_element_wise('{"event type": ', text, "}", "")


def track_tables(track_rows: list[tuple], device: int, names: _Names, run_id: str, rank: int,
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
