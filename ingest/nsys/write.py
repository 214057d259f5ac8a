"""Stream one Nsight GPU from its export into the lake, a bounded batch of slices at a time.

Why: holding a GPU's slices whole (to number, nest, contextualize and write
them) made the load's peak grow with the GPU's slice count: 2 GiB and more per
GPU of a 713 MB export, three times the file. Here SQLite hands a GPU's rows
over in slice order (:mod:`.ordered`) in batches of :data:`BATCH_ROWS`, and each
batch is numbered, nested, given its context and written as it comes, so the
peak is a batch, the state carried between batches, and the Parquet writers'
open row groups, whatever the GPU's size. What is carried:

* the slices still open on each track (:mod:`.carry`): the nesting's stack,
  and the ancestors the annotation context and range lineages walk up;
* for device work, its launch: the CPU rows come first, and of each CUDA call
  whose correlation id some device row of the GPU carries, its slice columns
  and the NVTX range around it are kept (about one row per kernel); a device
  batch then gets its context from :func:`ingest.slice_context.with_context`
  over the batch and those calls, with the batch's ``ac2g`` flows (the call
  Kineto links: the runtime call first, then the earliest);
* the lake's row order: device work first, then the CPU rows with ``has_role``,
  then the others (:mod:`ingest.lake`). The CPU rows are read first and put
  aside on disk (:mod:`.spill`) until the device work is written.

The rules (names, args, nesting, context, ranges) are the ones the whole-GPU
path used; the lake files hold the same rows in the same order and row groups
(``benchmarks/nsys_lake_digest.py``; ``tests/test_nsys_stream.py`` checks that
any batch size gives the lake of one batch).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracehouse.core.warehouse import Warehouse

from .. import lake, schema
from ..annotation_context import ANNOTATION_RANGES, annotation_ranges
from ..memory import release_free_memory, system_arrow_pool
from ..name_match import per_name
from ..schema import LAKE_TABLES, TRACE_TABLES
from ..slice_context import with_context
from ..trace_types import TraceFile, display_path
from .args import SOURCE_CODE, ArgsText
from .carry import OpenSlices
from .fetch import SideBatch, side_batches
from .groups import GroupedWriter
from .launches import Launches, find_sorted
from .names import StringLookup, source_names
from .nvtx import NVTX_MARK
from .ordered import Ints, Side, Table, cpu_keys, cpu_rows_where, cpu_side, gpu_side
from .parse import (
    COLUMN_TYPES,
    CPU_SOURCES,
    FILE_FORMAT,
    GPU_SOURCES,
    LAYOUT,
    ExportPlan,
    args_lookups,
    device_properties,
    held_back_columns,
    stand_in_args,
    track_tables,
)
from .read import NsysDatabase
from .slice_order import SideOrder, order_side
from .spill import Spill

#: Rows per batch read from SQLite and carried through to the writer: a batch's
#: columns, names and args are a few tens of MiB.
BATCH_ROWS = 64 * 1024
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

#: The slice category of each activity table's rows (an NVTX mark: ``nvtx_mark``).
_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_graph", "cuda_runtime",
               "cuda_driver", "nvtx", "nvtx_mark")
_CATEGORY_OF = {"kernel": 0, "memcpy": 1, "memset": 2, "graph": 3, "runtime": 4, "driver": 5,
                "nvtx": 6}
_MARK_CATEGORY = 7

#: A batch's slices as they are numbered, before nesting (``args`` is the stand-in
#: the context reads, :func:`~.parse.stand_in_args`).
_BATCH = pa.schema([
    ("slice_id", pa.int64()), ("ts", pa.int64()), ("dur", pa.int64()),
    ("phase", pa.string()), ("category", pa.string()), ("name", pa.string()),
    ("track_id", pa.int64()), ("correlation", pa.int64()), ("device", pa.int64()),
    ("stream", pa.int64()), ("args", pa.string())])
#: With their nesting (:class:`.carry.OpenSlices` appends these three).
_NESTED = pa.schema([*_BATCH, ("depth", pa.int64()), ("parent_id", pa.int64()),
                     ("is_partial_overlap", pa.bool_())])
#: The lake's ``slices`` but the columns constant or NULL on an Nsight GPU (as spilled).
_SPILLED = pa.schema([field for field in LAKE_TABLES["slices"]
                      if field.name not in ("run_id", "rank", "trace_id")
                      and field.name not in held_back_columns("", 0, "", 0)])
_NO_FLOWS = schema.FLOWS.empty_table()


@dataclass
class NsysGpu:
    """One GPU of an export, to be streamed into the lake by :func:`write_gpu_tmp`, and
    (once written) what the runner reports of it."""

    db: NsysDatabase
    plan: ExportPlan
    index: int
    source: TraceFile
    trace_id: str
    content_hash: str
    ingested_at: object
    #: Rows per batch (None: :data:`BATCH_ROWS`, looked up when the GPU is streamed).
    batch_rows: int | None = None
    slices: int = 0
    flows: int = 0
    profiler_steps: tuple[int, ...] = ()

    @property
    def device(self) -> int:
        return self.plan.devices[self.index]

    @property
    def rank(self) -> int:
        return self.plan.first_rank + self.index


def write_gpu_tmp(warehouse: Warehouse, run_id: str, part: NsysGpu,
                  token: str) -> list[tuple[Path, Path]]:
    """Stream every table of one GPU to lake temporaries; return (tmp, final) in commit
    order. Fills ``part``'s counts and profiler steps."""
    finals = {table: lake.trace_file(warehouse, table, run_id, part.trace_id)
              for table in TRACE_TABLES}
    tmps = {table: final.with_name(f".{final.name}.{token}{lake.TMP_SUFFIX}")
            for table, final in finals.items()}
    pending: list[tuple[Path, Path]] = []
    with system_arrow_pool():
        gpu = _GpuStream(part, run_id, tmps)
        try:
            written = gpu.run()
            for table in TRACE_TABLES:
                if table in written:
                    pending.append((tmps[table], finals[table]))
                else:
                    pending.append((lake.write_parquet_tmp(gpu.small_tables[table],
                                                           finals[table], token), finals[table]))
        except BaseException:
            gpu.discard()
            lake.discard(pending)
            raise
    return pending


def gpu_sides(db: NsysDatabase, plan: ExportPlan, index: int) -> tuple[Side | None, Side | None]:
    """The export's ``index``-th GPU as its two sides (:mod:`.ordered`): its device work,
    and the CPU rows of the processes that launch most on it (the first GPU: also those
    of every process that launches nothing, and rows without a process)."""
    device = plan.devices[index]
    mapped = [pid for pid, _device in plan.process_device]
    pids = [pid for pid, owner in plan.process_device if owner == device]
    gpu = gpu_side(db, _tables(GPU_SOURCES), device, COLUMN_TYPES)
    cpu = cpu_side(db, _tables(CPU_SOURCES),
                   cpu_rows_where(pids, mapped if index == 0 else None), COLUMN_TYPES)
    return gpu, cpu


def _tables(sources: tuple[tuple[str, object], ...]) -> list[tuple[int, Table]]:
    return [(SOURCE_CODE[key], Table(key, source.base, source.columns))
            for key, source in sources]


class _GpuStream:
    """The state of one GPU's stream: its sides, tracks, writers, spills and carries."""

    def __init__(self, part: NsysGpu, run_id: str, tmps: dict[str, Path]) -> None:
        self.part = part
        self.run_id = run_id
        plan = part.plan
        db = part.db
        self._batch_rows = part.batch_rows or BATCH_ROWS
        gpu, cpu = gpu_sides(db, plan, part.index)
        self.gpu = order_side(db, gpu) if gpu is not None else None
        self.cpu = order_side(db, cpu) if cpu is not None else None
        self.tracks = _Tracks(self.gpu, self.cpu, part.device)
        self.strings = StringLookup(plan.shared["strings"])
        lookups = args_lookups(plan.shared)
        self.args = ArgsText({"strings": self.strings,
                              "domains": StringLookup(lookups["domains"])})
        self.held_back = held_back_columns(run_id, part.rank, part.trace_id, 1)
        self.constants = {name: self.held_back[name][0] for name in ("run_id", "rank",
                                                                     "trace_id")}
        self.slices = GroupedWriter(tmps["slices"], LAKE_TABLES["slices"], lambda rows: {
            "compression": "zstd",
            **lake._encoding_options(LAKE_TABLES["slices"])})  # noqa: SLF001 - same files
        self.ranges = GroupedWriter(tmps["annotation_ranges"], ANNOTATION_RANGES, lambda rows: {
            "compression": "zstd" if rows >= lake.COMPRESS_FROM_ROWS else "none",
            **lake._encoding_options(ANNOTATION_RANGES)})  # noqa: SLF001
        self.flows = GroupedWriter(tmps["flows"], schema.FLOWS, lambda rows: (
            lake._write_options(_null_rows(schema.FLOWS, rows))))  # noqa: SLF001
        self.role_spill = Spill(tmps["slices"].with_suffix(".role.arrows"), _SPILLED)
        self.other_spill = Spill(tmps["slices"].with_suffix(".other.arrows"), _SPILLED)
        self.small_tables: dict[str, pa.Table] = {}
        self.steps: set[int] = set()
        self.partial = 0
        self.start: int | None = None
        self.end: int | None = None

    def run(self) -> set[str]:
        """Stream the GPU; return the tables written here (the rest: :attr:`small_tables`)."""
        launches = self._cpu_pass()
        self._gpu_pass(launches)
        del launches
        self._replay()
        self.ranges.close(write_empty=True)
        self.flows.close(write_empty=True)
        self.args.close()
        self.part.slices = self.slices.rows
        self.part.flows = self.flows.rows
        self.part.profiler_steps = tuple(sorted(self.steps))
        threads, processes = track_tables(self.tracks.rows, self.part.device,
                                          self.part.plan.names, self.run_id, self.part.rank,
                                          self.part.trace_id)
        self.small_tables = {"threads": threads, "processes": processes,
                             "process_groups": schema.PROCESS_GROUPS.empty_table(),
                             "traces": self._traces_row()}
        return {"slices", "annotation_ranges", "flows"}

    def _replay(self) -> None:
        """The CPU rows put aside, after the device work: ``has_role`` rows, then the rest."""
        for table in self.role_spill.tables():
            self.slices.write(self._complete(table))
        self.slices.end_part()
        for table in self.other_spill.tables():
            self.slices.write(self._complete(table))
            release_free_memory()
        self.slices.close()

    def discard(self) -> None:
        for writer in (self.slices, self.ranges, self.flows):
            writer.abort()
            writer.path.unlink(missing_ok=True)
        self.role_spill.discard()
        self.other_spill.discard()
        self.args.close()

    # ---- one batch's slices -----------------------------------------------------------

    def _batch(self, batch: SideBatch, first_id: int, cpu: bool
               ) -> tuple[pa.Table, pa.Array]:
        """The batch's slices (:data:`_BATCH`), numbered from ``first_id``, and their args."""
        n = batch.num_rows
        names, args, positions = [], [], []
        category = np.empty(n, dtype=np.int8)
        for piece in batch.pieces:
            key = piece.arm.key
            names.append(source_names(key, piece.rows, self.strings))
            args.append(self.args(key, piece.rows))
            positions.append(piece.at)
            category[piece.at] = _CATEGORY_OF[key]
        name, text = _in_batch_order(names, positions, n), _in_batch_order(args, positions, n)
        start = batch.ints("start")
        if cpu:
            kind, key, end = self._cpu_keys(batch)
            event_type = batch.ints("eventType")
            mark = event_type.valid & (event_type.values == NVTX_MARK)
            category[(category == _CATEGORY_OF["nvtx"]) & mark] = _MARK_CATEGORY
            track = self.tracks.cpu_ids(kind.values, key)
            device = stream = pa.nulls(n, pa.int64())
            stand_in = stand_in_args(pa.chunked_array([event_type.array()]))
        else:
            end = batch.ints("end")
            mark = np.zeros(n, dtype=bool)
            stream_ids = batch.ints("streamId")
            track = self.tracks.gpu_ids(stream_ids)
            device, stream = batch.ints("deviceId").array(), stream_ids.array()
            stand_in = pa.nulls(n, pa.string())
        dur = np.where(end.valid, np.maximum(end.values - start.values, 0), 0)
        rows = pa.table([
            pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
            pa.array(start.values + self.part.plan.base_ns), pa.array(dur),
            pa.array(["X", "i"]).take(pa.array(mark.astype(np.int8))),
            pa.array(_CATEGORIES).take(pa.array(category)), name, pa.array(track),
            batch.ints("correlationId").array(), device, stream, stand_in], schema=_BATCH)
        return rows, text

    @staticmethod
    def _cpu_keys(batch: SideBatch) -> tuple[Ints, Ints, Ints]:
        """The CPU rows' track kind, track key and sort end (:func:`.ordered.cpu_keys`), in
        batch order."""
        n = batch.num_rows
        kind, key, end = (Ints(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
                          for _ in range(3))
        for piece in batch.pieces:
            rows = piece.rows
            found = cpu_keys(piece.arm.key == "nvtx", rows.num_rows,
                             lambda name, rows=rows: Ints.of(
                                 rows[name] if name in rows.column_names else None,
                                 rows.num_rows))
            for into, value in zip((kind, key, end), found):
                into.values[piece.at] = value.values
                into.valid[piece.at] = value.valid
        return kind, key, end

    def _lake_rows(self, context: pa.Table, args: pa.Array) -> pa.Table:
        """Contextualized slices with their real ``args``, as spilled (:data:`_SPILLED`)."""
        columns = dict(zip(context.column_names, context.columns))
        columns["args"] = args
        return pa.table([columns[name] for name in _SPILLED.names], schema=_SPILLED)

    def _complete(self, table: pa.Table) -> pa.Table:
        """Spilled rows with the constant and NULL columns, in the lake's column order."""
        columns = dict(zip(table.column_names, table.columns))
        rows = table.num_rows
        columns |= {name: _repeat(value, rows) for name, value in self.held_back.items()}
        return pa.table([columns[name] for name in LAKE_TABLES["slices"].names],
                        schema=LAKE_TABLES["slices"])

    def _with_constants(self, table: pa.Table) -> pa.Table:
        for name in ("run_id", "rank", "trace_id"):
            table = table.append_column(name, _repeat(self.held_back[name], table.num_rows))
        return table

    def _account(self, rows: pa.Table) -> None:
        """The trace's figures that every slice adds to (span, partial overlaps)."""
        if not rows.num_rows:
            return
        ts, dur = _ints(rows["ts"]), _ints(rows["dur"])
        first, last = int(ts.min()), int((ts + dur).max())
        self.start = first if self.start is None else min(self.start, first)
        self.end = last if self.end is None else max(self.end, last)
        self.partial += pc.sum(rows["is_partial_overlap"]).as_py() or 0

    # ---- the CPU side first -----------------------------------------------------------

    def _cpu_pass(self) -> Launches:
        """Number, nest and contextualize the CPU rows, write their annotation ranges and
        put the rows aside; keep the calls that launch this GPU's work."""
        open_slices = OpenSlices(_NESTED)
        launches = Launches(self.tracks.correlations, _NESTED)
        first_id = self.tracks.gpu_rows
        threads = self.tracks.context_threads
        for batch in side_batches(self.part.db, self.cpu, self._batch_rows) \
                if self.cpu is not None else ():
            rows, args = self._batch(batch, first_id, cpu=True)
            first_id += rows.num_rows
            combined, carried = open_slices.nest(rows)
            context = with_context(combined, _NO_FLOWS, threads)
            found = annotation_ranges(self._with_constants(context))
            self.ranges.write(found.filter(pc.greater_equal(found["slice_id"],
                                                            context["slice_id"][carried])))
            launches.add(context, carried)
            mine = context.slice(carried)
            self._account(mine)
            self.steps.update(_profiler_steps(mine))
            role = mine["has_role"].to_numpy(zero_copy_only=False)
            spilled = self._lake_rows(mine, args)
            self.role_spill.write(spilled.filter(pa.array(role)))
            self.other_spill.write(spilled.filter(pa.array(~role)))
            release_free_memory()
        launches.seal()
        return launches

    # ---- then the device work ---------------------------------------------------------

    def _gpu_pass(self, launches: Launches) -> None:
        """Number, nest and contextualize the device rows (their launches from
        ``launches``) and write them and their flows."""
        if self.gpu is None:
            return
        open_slices = OpenSlices(_NESTED)
        first_id = 0
        threads = self.tracks.context_threads
        for batch in side_batches(self.part.db, self.gpu, self._batch_rows):
            rows, args = self._batch(batch, first_id, cpu=False)
            first_id += rows.num_rows
            combined, carried = open_slices.nest(rows)
            mine = combined.slice(carried)
            flows, calls = launches.for_rows(mine, self.flows.rows, self.constants)
            context = with_context(pa.concat_tables([mine, calls]), flows, threads)
            context = context.slice(0, mine.num_rows)
            self._account(context)
            self.slices.write(self._complete(self._lake_rows(context, args)))
            self.flows.write(flows)
            release_free_memory()

    def _traces_row(self) -> pa.Table:
        part, source = self.part, self.part.source
        steps = sorted(self.steps)
        n = self.slices.rows
        return pa.Table.from_pylist([{
            "run_id": self.run_id, "trace_id": part.trace_id, "rank": part.rank,
            "world_size": part.plan.world, "iteration": source.iteration_hint,
            "min_profiler_step": steps[0] if steps else None,
            "max_profiler_step": steps[-1] if steps else None,
            "path": display_path(source.path), "file_format": FILE_FORMAT, "layout": LAYOUT,
            "size_bytes": source.size_bytes, "uncompressed_bytes": source.size_bytes,
            "mtime_ns": source.mtime_ns, "content_hash": part.content_hash, "engine": "native",
            "schema_version": None, "base_time_ns": part.plan.base_ns,
            "trace_start_ns": self.start, "trace_end_ns": self.end, "event_count": n,
            "slice_count": n, "flow_count": self.flows.rows, "unpaired_flow_events": 0,
            "partial_overlap_count": self.partial, "backend": None,
            "host_name": None, "kineto_trace_id": None,
            "distributed_info": json.dumps({"rank": part.rank, "nsys_device": part.device}),
            "device_properties": device_properties(part.plan.shared, part.device),
            # Nsight records no operator shapes: no FLOP model reads its ops.
            "has_op_shapes": False, "ingested_at": part.ingested_at,
            "lake_format": schema.LAKE_FORMAT,
        }], schema=schema.TRACES)


class _Tracks:
    """A GPU's tracks, numbered as the lake numbers them: its streams (in stream order),
    then its CPU tracks by kind (``nvtx_async`` before ``thread``) and key; with each
    one's slice count, and the GPU's correlation ids (sorted), from the sides' keys
    (:class:`.slice_order.SideOrder`)."""

    def __init__(self, gpu: SideOrder | None, cpu: SideOrder | None, device: int) -> None:
        streams = gpu.tracks if gpu is not None else []
        cpu_rows = cpu.tracks if cpu is not None else []
        self.rows: list[tuple] = []
        for stream, count in streams:
            self.rows.append(("gpu", stream, device, len(self.rows), count))
        for kind, key, count in cpu_rows:
            if key is None:
                pid = None
            else:
                pid = (key >> 32) if kind == 0 else (key >> 24) & 0xFFFFFF
            self.rows.append(("nvtx_async" if kind == 0 else "thread", key, pid,
                              len(self.rows), count))
        self.gpu_rows = sum(count for _stream, count in streams)
        self._gpu = _KeyIds([(stream, i) for i, (stream, _n) in enumerate(streams)])
        first = len(streams)
        self._cpu = {kind: _KeyIds([(key, first + i) for i, (k, key, _n) in enumerate(cpu_rows)
                                    if k == kind]) for kind in (0, 1)}
        self.context_threads = pa.table({
            "track_id": pa.array([row[3] for row in self.rows], pa.int64()),
            "is_gpu": pa.array([row[0] == "gpu" for row in self.rows], pa.bool_())})
        self.correlations = (gpu.correlations if gpu is not None
                             else np.zeros(0, dtype=np.int64))

    def gpu_ids(self, stream: Ints) -> np.ndarray:
        return self._gpu.ids(stream)

    def cpu_ids(self, kind: np.ndarray, key: Ints) -> np.ndarray:
        ids = np.empty(kind.size, dtype=np.int64)
        for value, lookup in self._cpu.items():
            at = np.flatnonzero(kind == value)
            if at.size:
                ids[at] = lookup.ids(Ints(key.values[at], key.valid[at]))
        return ids


class _KeyIds:
    """Track ids by key (``None``: the rows without one)."""

    def __init__(self, pairs: list[tuple[int | None, int]]) -> None:
        known = [(key, track) for key, track in pairs if key is not None]
        self._keys = np.array([key for key, _track in known], dtype=np.int64)
        self._ids = np.array([track for _key, track in known], dtype=np.int64)
        self._null = next((track for key, track in pairs if key is None), -1)

    def ids(self, keys: Ints) -> np.ndarray:
        values, valid = keys.values, keys.valid
        at, hit = find_sorted(self._keys, values)
        return np.where(valid & hit, self._ids[np.minimum(at, max(self._ids.size - 1, 0))]
                        if self._ids.size else -1, self._null)


def _in_batch_order(parts: list[pa.Array], positions: list[np.ndarray], n: int) -> pa.Array:
    """Per-table arrays put back in the batch's row order."""
    if len(parts) == 1:
        return parts[0]
    inverse = np.empty(n, dtype=np.int64)
    inverse[np.concatenate(positions)] = np.arange(n, dtype=np.int64)
    return pa.concat_arrays(parts).take(pa.array(inverse))


def _ints(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """An integer column as int64 numpy, NULL as ``fill``."""
    return pc.fill_null(column, fill).to_numpy(zero_copy_only=False).astype(np.int64,
                                                                          copy=False)


def _repeat(value: pa.Array, rows: int) -> pa.Array:
    """The held-back column ``value`` (a one-value or empty array) for ``rows`` rows."""
    if len(value):
        return pa.repeat(value[0], rows)
    return pa.nulls(rows, value.type)


def _null_rows(table_schema: pa.Schema, rows: int) -> pa.Table:
    return pa.table([pa.nulls(rows, field.type) for field in table_schema],
                    schema=table_schema)


def _profiler_steps(rows: pa.Table) -> set[int]:
    """The step numbers of the ``ProfilerStep#N`` NVTX ranges among ``rows``."""
    keep = pc.and_(pc.equal(rows["category"], "nvtx"),
                   per_name(rows["name"], lambda text: pc.starts_with(text, "ProfilerStep#")))
    names = rows["name"].filter(pc.fill_null(keep, False)).to_pylist()
    return {int(m.group(1)) for name in names if (m := _PROFILER_STEP.match(name))}

