"""The native engine: the bytes of one Kineto trace into rows of every per-trace lake table.

What it guarantees:

* every ``X`` event becomes a slice, every ``i`` event a zero-length slice;
* ``s``/``f`` events sharing ``(cat, id)`` become flows, bound to slices the
  way Perfetto binds them (``s`` and ``f`` with ``bp: "e"`` to the enclosing
  slice, other ``f`` to the next slice on the thread);
* times become absolute integer nanoseconds (``baseTimeNanoseconds`` +
  ``ts``), computed without float rounding of epoch-sized values;
* slices that start inside a slice and end after it are kept and flagged
  (``is_partial_overlap``), never dropped (:mod:`ingest.nesting`).

Its columns come from the compiled scanner (:mod:`ingest.kineto.scan`) or
from msgspec (:func:`ingest.kineto.columns.decode_columns`), the same
:class:`~ingest.kineto.columns.Columns` either way. Anything malformed
raises :class:`ingest.trace_types.TraceError` naming the problem; the
caller adds the file name.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import schema
from ..nesting import Nesting, bind_flow_endpoints, nest_slices
from ..numpy_arrow import arrow_array
from ..trace_types import ParsedTrace, TraceFile
from .arrow_tables import lake_table, repeat
from .columns import LEGACY_FLOW_CATEGORIES, TYPED_COLUMNS, Columns, concat, decode_columns
from .decode import decode_distributed
from .engine import KinetoEngine, native_decoder
from .scan import scan_columns
from .trace_rows import (
    LoadedFile,
    TraceSummary,
    has_op_shapes,
    process_groups,
    processes_table,
    resolve_rank,
    threads_table,
    traces_row,
)


def parse_kineto(data: bytes, source: TraceFile, loaded: LoadedFile,
                 engine: KinetoEngine = KinetoEngine.NATIVE) -> ParsedTrace:
    """Turn the bytes of one Kineto trace into rows of every per-trace lake table.

    ``engine``: ``NATIVE`` (the scanner where built, see
    :func:`ingest.kineto.engine.native_decoder`), ``SCANNER`` or ``MSGSPEC``.
    All give identical tables; the scanner hands anything unusual (every
    malformed file included) to msgspec, which words the error.
    """
    decoded = None
    if native_decoder(engine) is KinetoEngine.SCANNER:
        decoded = scan_columns(data)
    if decoded is None:
        decoded = decode_columns(data)
    del data  # the caller may have handed over its only reference: free the text now
    trace, columns, event_count = decoded

    dist = decode_distributed(trace.distributedInfo)
    rank, rank_source = resolve_rank(dist, source)
    run_id = source.run_id
    trace_id = loaded.trace_id

    n = columns.slice_count()
    ts_ns = concat(columns.ts, np.int64)
    dur_ns = concat(columns.dur, np.int64)
    track_arr = concat(columns.track, np.int64)
    nested = nest_slices(track_arr, ts_ns, dur_ns)
    steps = sorted(columns.steps)
    arrow = columns.arrow

    def chunked(name: str, type_: pa.DataType) -> pa.ChunkedArray:
        return pa.chunked_array(arrow[name], type=type_)

    slices = lake_table(
        {
            "run_id": repeat(run_id, n, pa.string()),
            "rank": repeat(rank, n, pa.int64()),
            "trace_id": repeat(trace_id, n, pa.string()),
            "slice_id": arrow_array(np.arange(n, dtype=np.int64)),
            "ts": arrow_array(ts_ns),
            "dur": arrow_array(dur_ns),
            "phase": chunked("phase", pa.string()),
            "category": chunked("category", pa.string()),
            "name": chunked("name", pa.string()),
            "track_id": arrow_array(track_arr),
            "depth": arrow_array(nested.depth),
            "parent_id": arrow_array(nested.parent, mask=nested.parent < 0),
            "is_partial_overlap": arrow_array(nested.partial),
            **{column: chunked(column, type_) for _, column, type_ in TYPED_COLUMNS},
            "args": chunked("args", pa.string()),
        },
        schema.PARSED_SLICES,
    )

    flows, unpaired = _flows(columns, track_arr, ts_ns, dur_ns, nested, run_id, rank, trace_id)
    threads, processes = _threads_and_processes(columns, track_arr, run_id, rank, trace_id)
    groups = process_groups(dist, run_id, rank, trace_id, slices)

    if n:
        end_ns = ts_ns + dur_ns
        start, end = int(ts_ns.min()), int(end_ns.max())
    else:
        start = end = None
    traces = traces_row(source, trace, dist, loaded, TraceSummary(
        engine=KinetoEngine.NATIVE.lake_name, rank=rank, steps=steps, start_ns=start,
        end_ns=end, event_count=event_count, slice_count=n, flow_count=flows.num_rows,
        unpaired_flow_events=unpaired, partial_overlap_count=int(nested.partial.sum()),
        has_op_shapes=has_op_shapes(trace.record_shapes, slices),
    ))
    return ParsedTrace(
        trace_id=trace_id,
        rank=rank,
        iteration=source.iteration_hint,
        profiler_steps=tuple(steps),
        world_size=dist.world_size,
        rank_source=rank_source,
        tables={
            "slices": slices,
            "flows": flows,
            "threads": threads,
            "processes": processes,
            "process_groups": groups,
            "traces": traces,
        },
    )


def _group_ids(category: np.ndarray, id_is_int: np.ndarray, flow_id: np.ndarray) -> np.ndarray:
    """Dense ids of the (category, id kind, id) triples, in sorted order of the triples.

    What ``np.unique(axis=0, return_inverse=True)`` returns, by one lexsort:
    the row-wise unique sorts a structured view and costs ~4 ms per MB of JSON.
    """
    m = category.size
    key = np.zeros(m, dtype=np.int64)
    if m == 0:
        return key
    order = np.lexsort((flow_id, id_is_int, category))
    c, k, f = category[order], id_is_int[order], flow_id[order]
    new = np.empty(m, dtype=bool)
    new[0] = False
    new[1:] = (c[1:] != c[:-1]) | (k[1:] != k[:-1]) | (f[1:] != f[:-1])
    key[order] = np.cumsum(new)
    return key


def _flows(columns: Columns, track_arr, ts_ns, dur_ns, nested: Nesting, run_id, rank,
           trace_id):
    """Pair ``s``/``f`` events by (category, id), k-th start with k-th finish in
    time order, and bind both ends to slices (searched in ``nested``'s order)."""
    category = concat(columns.flow_category, np.int64)
    flow_id = concat(columns.flow_id, np.int64)
    id_is_int = concat(columns.flow_id_is_int, bool)
    key = _group_ids(category, id_is_int, flow_id)
    category_names = [LEGACY_FLOW_CATEGORIES.get(c, c) for c in columns.flow_categories]
    is_finish = concat(columns.flow_finish, bool)
    ts = concat(columns.flow_ts, np.int64)
    track = concat(columns.flow_track, np.int64)
    bind_enclosing = concat(columns.flow_enclosing, bool)
    m = key.size

    order = np.lexsort((ts, is_finish, key))
    group = key[order] * 2 + is_finish[order]
    first = np.zeros(m, dtype=np.int64)
    if m:
        starts = np.flatnonzero(np.diff(group)) + 1
        first[starts] = starts
        first = np.maximum.accumulate(first)
    nth = np.arange(m, dtype=np.int64) - first
    pair_code = key[order] * (m + 1) + nth
    finish_sorted = is_finish[order]
    s_rows = order[~finish_sorted]
    f_rows = order[finish_sorted]
    _, s_pos, f_pos = np.intersect1d(pair_code[~finish_sorted], pair_code[finish_sorted],
                                     assume_unique=True, return_indices=True)
    out_rows = s_rows[s_pos]
    in_rows = f_rows[f_pos]
    slice_out = bind_flow_endpoints(track_arr, ts_ns, dur_ns, nested.parent, track[out_rows],
                                    ts[out_rows], np.ones(out_rows.size, dtype=bool),
                                    nested.order)
    slice_in = bind_flow_endpoints(track_arr, ts_ns, dur_ns, nested.parent, track[in_rows],
                                   ts[in_rows], bind_enclosing[in_rows], nested.order)
    bound = (slice_out >= 0) & (slice_in >= 0)
    unpaired = m - 2 * int(bound.sum())
    out_rows, in_rows = out_rows[bound], in_rows[bound]
    k = out_rows.size
    table = lake_table(
        {
            "run_id": repeat(run_id, k, pa.string()),
            "rank": repeat(rank, k, pa.int64()),
            "trace_id": repeat(trace_id, k, pa.string()),
            "flow_id": arrow_array(flow_id[out_rows], mask=~id_is_int[out_rows]),
            "category": [category_names[c] for c in category[out_rows].tolist()],
            "slice_out": arrow_array(slice_out[bound]),
            "slice_in": arrow_array(slice_in[bound]),
            "ts_out": arrow_array(ts[out_rows]),
            "ts_in": arrow_array(ts[in_rows]),
        },
        schema.FLOWS,
    )
    return table, unpaired




def _threads_and_processes(columns: Columns, track_arr, run_id, rank, trace_id):
    tracks, meta_events = columns.tracks, columns.meta
    thread_names: dict[tuple[object, object], str | None] = {}
    thread_sort: dict[tuple[object, object], int | None] = {}
    proc_names: dict[object, str | None] = {}
    proc_labels: dict[object, str | None] = {}
    proc_sort: dict[object, int | None] = {}
    for name, pid, tid, args in meta_events:
        if name == "thread_name":
            thread_names[(pid, tid)] = args.name
            tracks.setdefault((pid, tid), len(tracks))
        elif name == "thread_sort_index":
            thread_sort[(pid, tid)] = args.sort_index
        elif name == "process_name":
            proc_names[pid] = args.name
        elif name == "process_labels":
            proc_labels[pid] = args.labels
        elif name == "process_sort_index":
            proc_sort[pid] = args.sort_index

    n_tracks = len(tracks)
    counts = np.bincount(track_arr, minlength=n_tracks) if n_tracks else np.zeros(0, np.int64)
    is_gpu = np.zeros(n_tracks, dtype=bool)
    is_gpu[sorted(columns.gpu_tracks)] = True
    keys = list(tracks)  # insertion order == track_id
    threads = threads_table(run_id, rank, trace_id, keys, thread_names, thread_sort, is_gpu,
                            counts)
    pids = list(dict.fromkeys([pid for pid, _ in keys] + list(proc_names) + list(proc_labels)))
    processes = processes_table(run_id, rank, trace_id, pids, proc_names, proc_labels,
                                proc_sort)
    return threads, processes
