"""The rows every Kineto engine builds the same way: a trace's ``traces`` row,
its process groups, its rank, and whether its CPU ops carry shapes.

Why apart from the engines: the native and the Perfetto engine read slices
differently but must agree on these (tests/test_perfetto_engine.py compares
them), so both call these functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..json_numbers import INT64_MAX
from ..numpy_arrow import arrow_array
from ..trace_types import TraceError, TraceFile, display_path
from .arrow_tables import json_column, lake_table, repeat, str_or_none
from .decode import DistributedInfo, KinetoHeader, parse_ranks

_HEADER_FLAGS = {b"1": True, b"true": True, b"0": False, b"false": False}
_INPUT_DIMS_KEY = '"Input Dims"'
_INPUT_DIMS_BYTES = re.compile(re.escape(_INPUT_DIMS_KEY.encode()))


def _mentions(strings: pa.ChunkedArray, pattern: re.Pattern[bytes]) -> bool:
    """Whether ``pattern`` occurs anywhere in the string column's data buffers.

    Why: a trace without shapes (no header flag) is searched in full, and one
    search of each chunk's bytes in place (``re`` reads the Arrow buffer
    without a copy) is 3-4x faster than ``match_substring`` row by row (flowgen
    rank: 17 -> 5 ms). A buffer may hold bytes of no row (a sliced array), so
    a hit only means "search the rows"; a miss means no row holds it.
    """
    for chunk in strings.chunks:
        data = chunk.buffers()[2]
        if data is not None and pattern.search(memoryview(data)) is not None:
            return True
    return False


def has_op_shapes(record_shapes: msgspec.Raw, slices: pa.Table) -> bool:
    """Whether the trace's CPU ops carry their shapes (``Input Dims``).

    Why: the per-kernel FLOP model reads every CPU op's args, the bulk of a
    trace's bytes, and on a trace recorded without ``record_shapes`` finds
    nothing; the lake says so per trace, and the model skips those traces.
    The header's ``record_shapes`` (PyTorch writes 0 or 1) decides when
    present; a trace without it (older PyTorch, HTA's samples) has shapes
    when any ``cpu_op`` carries an ``Input Dims`` key, looked up only then.
    """
    flag = _HEADER_FLAGS.get(bytes(record_shapes).strip())
    if flag is not None:
        return flag
    if not _mentions(slices["args"], _INPUT_DIMS_BYTES):
        return False  # the key is in no value: no row-wise search needed
    # Every row's args searched in place: filtering the cpu_ops out first copied the
    # whole table (0.19 s of a 4 x 27 MB flowgen set's 5 s).
    is_op = pc.equal(slices["category"], "cpu_op")
    found = pc.any(pc.and_(is_op, pc.match_substring(slices["args"], _INPUT_DIMS_KEY))).as_py()
    return bool(found)


@dataclass(frozen=True)
class LoadedFile:
    """What the runner knows of a trace file before any engine parses it.

    Why a type: every engine writes these into the file's ``traces`` row
    unchanged; passing them as one value keeps the engines' signatures short
    and the runner the only place that decides them.
    """

    trace_id: str
    content_hash: str
    #: Size of the JSON text (the gunzipped size of a .json.gz).
    uncompressed_bytes: int
    file_format: str  # kineto_json | kineto_json_gz
    ingested_at: object


@dataclass(frozen=True)
class TraceSummary:
    """What an engine found in one trace, for its ``traces`` row."""

    engine: str  # the lake's name of the engine: native | perfetto
    rank: int
    steps: Sequence[int]  # ProfilerStep#N numbers, sorted
    start_ns: int | None  # first slice start; None without slices
    end_ns: int | None  # last slice end
    event_count: int
    slice_count: int
    flow_count: int
    unpaired_flow_events: int
    partial_overlap_count: int
    has_op_shapes: bool


def traces_row(source: TraceFile, header: KinetoHeader, dist: DistributedInfo,
               loaded: LoadedFile, found: TraceSummary) -> pa.Table:
    """The one ``traces`` row of a loaded file; every engine builds it here.

    ``header``: the file's top-level keys, as the scanner's header or either
    msgspec file type (both are :class:`~ingest.kineto.decode.KinetoHeader`) holds them.
    """
    steps = found.steps
    return lake_table(
        {
            "run_id": [source.run_id],
            "trace_id": [loaded.trace_id],
            "rank": [found.rank],
            "world_size": [dist.world_size],
            "iteration": [source.iteration_hint],
            "min_profiler_step": [steps[0] if steps else None],
            "max_profiler_step": [steps[-1] if steps else None],
            "path": [display_path(source.path)],
            "file_format": [loaded.file_format],
            "layout": [source.layout],
            "size_bytes": [source.size_bytes],
            "uncompressed_bytes": [loaded.uncompressed_bytes],
            "mtime_ns": [source.mtime_ns],
            "content_hash": [loaded.content_hash],
            "engine": [found.engine],
            "schema_version": [header.schemaVersion],
            "base_time_ns": [header.baseTimeNanoseconds or 0],
            "trace_start_ns": [found.start_ns],
            "trace_end_ns": [found.end_ns],
            "event_count": [found.event_count],
            "slice_count": [found.slice_count],
            "flow_count": [found.flow_count],
            "unpaired_flow_events": [found.unpaired_flow_events],
            "partial_overlap_count": [found.partial_overlap_count],
            "backend": [dist.backend],
            "host_name": [header.host_name],
            "kineto_trace_id": [header.trace_id],
            "distributed_info": json_column([header.distributedInfo], "distributedInfo"),
            "device_properties": json_column([header.deviceProperties], "deviceProperties"),
            "has_op_shapes": [found.has_op_shapes],
            "ingested_at": [loaded.ingested_at],
            "lake_format": [schema.LAKE_FORMAT],
        },
        schema.TRACES,
    )


def resolve_rank(dist: DistributedInfo, source: TraceFile) -> tuple[int, str]:
    """The trace's rank and where it came from (both engines use this).

    ``distributedInfo.rank``, else the file name; else, for a trace of a
    job that was not distributed (no world size above 1: a single-GPU run,
    HTA loads those), rank 0, marked ``single_process`` so that the runner
    can refuse a run holding several such traces.
    """
    if dist.rank is not None:
        rank, where = dist.rank, "distributedInfo"
    elif source.rank_hint is not None:
        rank, where = source.rank_hint, "file name"
    elif dist.world_size is None or dist.world_size <= 1:
        rank, where = 0, "single_process"
    else:
        raise TraceError("no_rank", f"no rank in distributedInfo.rank nor in the file name "
                         f"(world size {dist.world_size})",
                         "name the file rank-N.json or rank_XXXX_iter_N.pt.trace.json")
    if not -INT64_MAX - 1 <= rank <= INT64_MAX:
        raise TraceError("number_out_of_range", f"rank {rank} does not fit int64",
                         "check distributedInfo.rank or the rank in the file name")
    return rank, where


def threads_table(run_id: str, rank: int, trace_id: str, keys: list[tuple[object, object]],
                  names: Mapping[tuple[object, object], str | None],
                  sort_index: Mapping[tuple[object, object], int | None], is_gpu: np.ndarray,
                  slice_counts: np.ndarray) -> pa.Table:
    """The ``threads`` rows of a trace: one per ``(pid, tid)`` key, its track id its
    position in ``keys``; ``is_gpu`` and ``slice_counts`` by track id."""
    n = len(keys)
    return lake_table(
        {
            "run_id": repeat(run_id, n, pa.string()),
            "rank": repeat(rank, n, pa.int64()),
            "trace_id": repeat(trace_id, n, pa.string()),
            "track_id": list(range(n)),
            "pid": [str_or_none(pid) for pid, _ in keys],
            "tid": [str_or_none(tid) for _, tid in keys],
            "thread_name": [names.get(key) for key in keys],
            "thread_sort_index": [sort_index.get(key) for key in keys],
            "is_gpu": arrow_array(is_gpu),
            "slice_count": arrow_array(slice_counts.astype(np.int64)),
        },
        schema.THREADS,
    )


def processes_table(run_id: str, rank: int, trace_id: str, pids: list[object],
                    names: Mapping[object, str | None], labels: Mapping[object, str | None],
                    sort_index: Mapping[object, int | None]) -> pa.Table:
    """The ``processes`` rows of a trace: one per pid, with the metadata the file gave."""
    p = len(pids)
    return lake_table(
        {
            "run_id": repeat(run_id, p, pa.string()),
            "rank": repeat(rank, p, pa.int64()),
            "trace_id": repeat(trace_id, p, pa.string()),
            "pid": [str_or_none(pid) for pid in pids],
            "process_name": [names.get(pid) for pid in pids],
            "process_labels": [labels.get(pid) for pid in pids],
            "process_sort_index": [sort_index.get(pid) for pid in pids],
        },
        schema.PROCESSES,
    )


def process_groups(dist: DistributedInfo, run_id: str, rank: int, trace_id: str,
                   slices: pa.Table | None = None) -> pa.Table:
    """Groups this rank belongs to: ``distributedInfo.pg_config``, then any group
    that only the comm args name (``Process Group Name``/``Description``/``Ranks``
    on ``record_param_comms`` and NCCL kernels), e.g. traces without pg_config."""
    rows = [
        ("pg_config", str_or_none(c.pg_name), c.pg_desc, c.backend_config, c.pg_size,
         parse_ranks(c.ranks))
        for c in dist.pg_config or []
    ]
    if slices is not None and slices.num_rows:
        known = {row[1] for row in rows}
        named = slices.filter(pc.is_valid(slices["process_group_name"])).select(
            ["process_group_name", "process_group_desc", "process_group_ranks", "group_size"])
        seen: dict[str, tuple] = {}
        for name, desc, ranks, size in zip(*(named[c].to_pylist() for c in named.column_names)):
            if name in known:
                continue
            # Prefer a mention that lists the ranks ("wait" ops carry an empty list).
            if name not in seen or (ranks and not seen[name][5]):
                size = size if size is not None else (len(ranks) if ranks else None)
                seen[name] = ("comm_args", name, desc, None, size, ranks or None)
        rows.extend(seen.values())
    g = len(rows)
    source, name, desc, backend, size, ranks = (list(col) for col in zip(*rows)) if rows else (
        [], [], [], [], [], [])
    return lake_table(
        {
            "run_id": repeat(run_id, g, pa.string()),
            "rank": repeat(rank, g, pa.int64()),
            "trace_id": repeat(trace_id, g, pa.string()),
            "source": source,
            "pg_name": name,
            "pg_desc": desc,
            "backend_config": backend,
            "pg_size": size,
            "ranks": ranks,
        },
        schema.PROCESS_GROUPS,
    )
