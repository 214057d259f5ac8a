"""Parse one Kineto (PyTorch profiler) Chrome-trace JSON file into lake tables.

Why msgspec: typed decoding into ``Struct`` classes is several times faster
than ``json``/``orjson`` into dicts and keeps ``args`` as raw JSON bytes
(``msgspec.Raw``) until we need them, so the common case (hundreds of
thousands of ``cpu_op``/``python_function`` events) costs one pass.

What the parser guarantees:

* every ``X`` event becomes a slice, every ``i`` event a zero-length slice;
* ``s``/``f`` events sharing ``(cat, id)`` become flows, bound to slices the
  way Perfetto binds them (``s`` and ``f`` with ``bp: "e"`` to the enclosing
  slice, other ``f`` to the next slice on the thread);
* times become absolute integer nanoseconds (``baseTimeNanoseconds`` +
  ``ts``), computed without float rounding of epoch-sized values;
* slices that start inside a slice and end after it are kept and flagged
  (``is_partial_overlap``), never dropped (:mod:`ingest.nesting`).

Anything malformed raises :class:`ingest.model.TraceError` naming the
problem; the caller adds the file name.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import schema
from .model import ParsedTrace, TraceError, TraceFile, display_path
from .nesting import bind_flow_endpoints, nest_slices

INT64_MAX = 2**63 - 1
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, with ``args`` left as raw JSON."""

    ph: str = ""
    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    bp: str | None = None
    args: msgspec.Raw = msgspec.Raw()  # empty when absent


class KinetoFile(msgspec.Struct):
    """The top-level Kineto object; only what the lake keeps is decoded."""

    traceEvents: list[Event]  # noqa: N815 (Kineto's key)
    schemaVersion: int | None = None  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw()  # noqa: N815 (empty when absent)
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    trace_id: str | None = None
    host_name: str | None = None


class DistributedInfo(msgspec.Struct):
    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    pg_config: list[PgConfig] | None = None


class PgConfig(msgspec.Struct):
    pg_name: str | int | None = None
    pg_desc: str | None = None
    backend_config: str | None = None
    pg_size: int | None = None
    ranks: list[int] | str | None = None


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys that become typed columns; the rest stays as JSON."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: str | list[int] | None = msgspec.field(default=None, name="Process Group Ranks")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    # metadata (M) events
    name: str | None = None
    labels: str | None = None
    sort_index: int | None = None


_FILE_DECODER = msgspec.json.Decoder(KinetoFile)
_ARRAY_DECODER = msgspec.json.Decoder(list[Event])
_DIST_DECODER = msgspec.json.Decoder(DistributedInfo)
_ARGS_DECODER = msgspec.json.Decoder(Args)
_EMPTY_ARGS = Args()


def decode_kineto(data: bytes) -> KinetoFile:
    """Decode the JSON text of a trace, mapping every failure to a TraceError."""
    stripped = data.lstrip()
    if not stripped:
        raise TraceError("empty", "the file is empty", "re-export the trace; the profiler "
                         "may have been killed before it wrote anything")
    try:
        if stripped[:1] == b"[":
            return KinetoFile(traceEvents=_ARRAY_DECODER.decode(data))
        return _FILE_DECODER.decode(data)
    except UnicodeDecodeError as exc:
        # exc.start counts from the start of the string, not of the file: not worth showing.
        raise TraceError("invalid_utf8", f"invalid UTF-8 in a string ({exc.reason})",
                         "JSON must be UTF-8; re-export the trace") from exc
    except msgspec.ValidationError as exc:
        text = str(exc)
        # Not Kineto at all: no traceEvents list, or the top level (or the first
        # item of a bare event array) is not an object. A later bad item is a bad event.
        not_kineto = ("missing required field `traceEvents`" in text
                      or text.endswith(("- at `$.traceEvents`", "- at `$[0]`"))
                      or " - at `" not in text)
        if not_kineto:
            raise TraceError("not_kineto", f"not a Kineto trace: {text}",
                             "expected a PyTorch profiler trace with a `traceEvents` list") from exc
        if "out of range" in text:
            raise TraceError("number_out_of_range", text,
                             "a number does not fit its field") from exc
        raise TraceError("invalid_event", text, "the trace does not follow the Chrome "
                         "trace event format") from exc
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "truncated" in text:
            raise TraceError("truncated", "the JSON ends early (truncated file)",
                             "the copy or the profiler's write was cut short; "
                             "copy it again") from exc
        raise TraceError("invalid_json", f"invalid JSON: {text}",
                         "the file is not valid JSON") from exc


def _to_ns(values: list[float | None], base_ns: int, what: str) -> np.ndarray:
    """Microsecond floats → int64 nanoseconds, exact for epoch-sized values.

    ``ts * 1000`` in float64 loses up to 256 ns at epoch microseconds
    (1.7e15); splitting into whole and fractional microseconds keeps it exact.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size and not np.all(np.isfinite(arr)):
        raise TraceError("invalid_event", f"a {what} value is missing or not a finite number",
                         "every complete or instant event needs numeric ts and dur")
    whole = np.floor(arr)
    if arr.size and (np.abs(whole).max() * 1000 + abs(base_ns)) >= INT64_MAX:
        raise TraceError("number_out_of_range", f"a {what} value exceeds the int64 "
                         "nanosecond range", "check the event times in the trace")
    frac_ns = np.rint((arr - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns + base_ns


def _parse_ranks(value: str | list[int] | None) -> list[int] | None:
    """``"[0, 1, 2]"`` (how PyTorch writes Process Group Ranks) → list of ints."""
    if value is None:
        return None
    if isinstance(value, list):
        return value
    body = value.strip().removeprefix("[").removesuffix("]").strip()
    if not body:
        return []
    try:
        return [int(part) for part in body.split(",")]
    except ValueError:
        return None  # e.g. an abbreviated list; the JSON args still hold the text


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _absent(raw: msgspec.Raw) -> bool:
    return len(raw) == 0 or bytes(raw) == b"null"


def _decode_args(raw: msgspec.Raw) -> Args:
    if len(raw) == 0:
        return _EMPTY_ARGS
    try:
        return _ARGS_DECODER.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        pass
    # A known key with an unexpected type: keep the event and its JSON, leave
    # the typed columns of that key empty. Unusable JSON raises a TraceError.
    generic = _decode_raw_args(raw)
    if not isinstance(generic, dict):
        raise TraceError("invalid_event", "an event's args is not an object",
                         "args must be a JSON object")
    fields = {}
    for field_name, key in _ARGS_KEYS.items():
        value = generic.get(key)
        expected = _ARGS_TYPES[field_name]
        if isinstance(value, expected) and not isinstance(value, bool):
            fields[field_name] = value
    return Args(**fields)


def _decode_raw_args(raw: msgspec.Raw) -> object:
    """``args`` as plain Python values; a TraceError where its JSON is unusable.

    ``msgspec.Raw`` only checks the structure of the JSON it skips: string
    escapes (a lone surrogate ``\\ud800``) and UTF-8 are checked when decoded.
    """
    try:
        return msgspec.json.decode(raw)
    except UnicodeDecodeError as exc:
        raise TraceError("invalid_utf8", f"invalid UTF-8 in an event's args ({exc.reason})",
                         "JSON must be UTF-8; re-export the trace") from exc
    except msgspec.DecodeError as exc:
        raise TraceError("invalid_event", f"an event's args is not valid JSON: {exc}",
                         "args must be a JSON object") from exc


_ARGS_KEYS = {f: msgspec.structs.fields(Args)[i].encode_name
              for i, f in enumerate(Args.__struct_fields__)}
_ARGS_TYPES: dict[str, tuple[type, ...]] = {
    "external_id": (int,), "correlation": (int,), "device": (int,), "stream": (int,),
    "collective_name": (str,), "pg_name": (str, int), "pg_desc": (str,),
    "pg_ranks": (str, list), "group_size": (int,), "in_nelems": (int,),
    "out_nelems": (int,), "dtype": (str,), "name": (str,), "labels": (str,),
    "sort_index": (int,),
}


_SLICE_PHASES = frozenset({"X", "i", "I"})
_FLOW_PHASES = frozenset({"s", "f", "t"})
#: Categories whose args hold none of the typed keys (Python ids only):
#: skipping them saves most of the args decoding on with_stack traces.
_UNTYPED_CATEGORIES = frozenset({"python_function"})
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[Args])
_SLICE_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")


def _columns_of(items: Sequence[object], attrs: Sequence[str]) -> list[list[object]]:
    """One list per attribute: ``map(attrgetter)`` runs in C, ~30 ns per value.

    Per-value attribute access is the floor of this parser's cost; this is the
    cheapest way we measured (zip-transposing tuples and comprehensions are
    1.4-2x slower)."""
    return [list(map(operator.attrgetter(attr), items)) for attr in attrs]


def _profiler_steps(names: pa.Array) -> list[int]:
    """Step numbers of the ``ProfilerStep#N`` slices, sorted and unique."""
    candidates = names.filter(pc.fill_null(pc.starts_with(names, "ProfilerStep#"), False))
    return sorted({int(m.group(1)) for nm in candidates.to_pylist()
                   if (m := _PROFILER_STEP.match(nm))})
_TYPED_COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("correlation", "correlation", pa.int64()),
    ("external_id", "external_id", pa.int64()),
    ("device", "device", pa.int64()),
    ("stream", "stream", pa.int64()),
    ("collective_name", "collective_name", pa.string()),
    ("pg_name", "process_group_name", pa.string()),
    ("pg_desc", "process_group_desc", pa.string()),
    ("pg_ranks", "process_group_ranks", pa.list_(pa.int64())),
    ("group_size", "group_size", pa.int64()),
    ("in_nelems", "in_msg_nelems", pa.int64()),
    ("out_nelems", "out_msg_nelems", pa.int64()),
    ("dtype", "dtype", pa.string()),
)


def _decode_args_batch(raws: list[msgspec.Raw]) -> list[Args]:
    """Decode many args objects in one call (per-call overhead dominates otherwise)."""
    if not raws:
        return []
    try:
        return _ARGS_LIST_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        # One by one: the fallback keeps events whose typed keys have odd types
        # and names the problem of the first unusable args.
        return [_decode_args(raw) for raw in raws]


def _lengths(raws: Sequence[msgspec.Raw]) -> np.ndarray:
    return np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))


def _typed_args(category: pa.Array, raws: Sequence[msgspec.Raw],
                lengths: np.ndarray) -> dict[str, pa.Array]:
    """The typed args columns for all slices (NULL where an event lacks the key)."""
    n = len(raws)
    untyped = pc.fill_null(pc.is_in(category, pa.array(sorted(_UNTYPED_CATEGORIES))), False)
    rows = np.flatnonzero((lengths > 0) & ~untyped.to_numpy(zero_copy_only=False))
    if rows.size == 0:
        subset: list[msgspec.Raw] = []
    elif rows.size == 1:
        subset = [raws[int(rows[0])]]
    else:
        subset = list(operator.itemgetter(*rows.tolist())(raws))
    decoded = _decode_args_batch(subset)
    take = np.full(n, -1, dtype=np.int64)
    take[rows] = np.arange(len(rows), dtype=np.int64)
    indices = pa.array(take, mask=take < 0)
    columns: dict[str, pa.Array] = {}
    transposed = _columns_of(decoded, [attr for attr, _, _ in _TYPED_COLUMNS])
    for (attr, column, type_), values in zip(_TYPED_COLUMNS, transposed):
        if attr == "pg_ranks":
            values = [_parse_ranks(v) for v in values]
        elif attr == "pg_name":
            values = [_str_or_none(v) for v in values]
        columns[column] = _column(values, type_, column).take(indices)
    return columns


def _column(values: Sequence[object], type_: pa.DataType, column: str) -> pa.Array:
    try:
        return pa.array(values, type=type_)
    except (OverflowError, pa.ArrowInvalid) as exc:
        if "UTF8" in str(exc) or "utf8" in str(exc).lower():
            raise TraceError("invalid_utf8", f"invalid UTF-8 in column {column}",
                             "JSON must be UTF-8; re-export the trace") from exc
        raise TraceError("number_out_of_range", f"a value of {column} does not fit "
                         f"{type_}: {exc}", "check the numbers in the trace's args") from exc


def _json_column(raws: Sequence[msgspec.Raw], column: str,
                 lengths: np.ndarray | None = None) -> pa.Array:
    """Raw JSON bytes → a validated UTF-8 string column (NULL where absent).

    Built from one joined buffer and an offsets array: no per-value copy.
    """
    if lengths is None:
        lengths = _lengths(raws)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    present = lengths > 0
    validity = None if present.all() else pa.array(present).buffers()[1]
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), lengths.size,
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))],
    )
    try:
        return binary.cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise TraceError("invalid_utf8", f"invalid UTF-8 in {column}",
                         "JSON must be UTF-8; re-export the trace") from exc


def _table(columns: dict[str, pa.Array | Sequence[object]], target: pa.Schema) -> pa.Table:
    arrays = []
    for field in target:
        values = columns[field.name]
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arrays.append(values if values.type == field.type else values.cast(field.type))
        else:
            arrays.append(_column(values, field.type, field.name))
    return pa.Table.from_arrays(arrays, schema=target)


def _repeat(value: object, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array([value] * n, type=type_) if n else pa.array([], type=type_)


def parse_kineto(data: bytes, source: TraceFile, *, trace_id: str, content_hash: str,
                 uncompressed_bytes: int, file_format: str, ingested_at: object) -> ParsedTrace:
    """Turn the bytes of one Kineto trace into rows of every per-trace lake table."""
    trace = decode_kineto(data)
    events = trace.traceEvents
    if not events:
        raise TraceError("empty", "the trace has no events", "profile at least one step")

    dist = _decode_distributed(trace.distributedInfo)
    rank = dist.rank if dist.rank is not None else source.rank_hint
    if rank is None:
        raise TraceError("no_rank", "no rank in distributedInfo.rank nor in the file name",
                         "name the file rank-N.json or rank_XXXX_iter_N.pt.trace.json, "
                         "or profile with torch.distributed initialised")
    if not -INT64_MAX - 1 <= rank <= INT64_MAX:
        raise TraceError("number_out_of_range", f"rank {rank} does not fit int64",
                         "check distributedInfo.rank or the rank in the file name")
    base_ns = trace.baseTimeNanoseconds or 0

    run_id = source.run_id
    tracks: dict[tuple[object, object], int] = {}
    track_of = tracks.setdefault

    slice_events = [ev for ev in events if ev.ph in _SLICE_PHASES]
    flow_events = [ev for ev in events if ev.ph in _FLOW_PHASES]
    meta_events = [ev for ev in events if ev.ph == "M"]
    n = len(slice_events)
    phs, cats, names, pids, tids, tss, durs, raw_args = _columns_of(slice_events, _SLICE_FIELDS)
    slice_tracks = [track_of(key, len(tracks)) for key in zip(pids, tids)]

    ts_ns = _to_ns(tss, base_ns, "ts")
    dur_ns = _to_ns([d if p == "X" else 0.0 for p, d in zip(phs, durs)], 0, "dur")
    if n and dur_ns.min() < 0:
        raise TraceError("invalid_event", "a complete ('X') event has a negative dur",
                         "durations must be >= 0")
    if n and bool(np.any(ts_ns > INT64_MAX - dur_ns)):
        # ts and dur each fit, but an end (ts + dur) would wrap around int64.
        raise TraceError("number_out_of_range", "an event ends beyond the int64 nanosecond "
                         "range (ts + dur)", "check the event times in the trace")

    track_arr = np.asarray(slice_tracks, dtype=np.int64)
    nested = nest_slices(track_arr, ts_ns, dur_ns)
    category = _column(cats, pa.string(), "category")
    args_lengths = _lengths(raw_args)
    typed = _typed_args(category, raw_args, args_lengths)
    name = _column(names, pa.string(), "name")
    steps = _profiler_steps(name)

    slices = _table(
        {
            "run_id": _repeat(run_id, n, pa.string()),
            "rank": _repeat(rank, n, pa.int64()),
            "trace_id": _repeat(trace_id, n, pa.string()),
            "slice_id": pa.array(np.arange(n, dtype=np.int64)),
            "ts": pa.array(ts_ns),
            "dur": pa.array(dur_ns),
            "phase": ["X" if p == "X" else "i" for p in phs],
            "category": category,
            "name": name,
            "track_id": pa.array(track_arr),
            "depth": pa.array(nested.depth),
            "parent_id": pa.array(nested.parent, mask=nested.parent < 0),
            "is_partial_overlap": pa.array(nested.partial),
            **typed,
            "args": _json_column(raw_args, "args", args_lengths),
        },
        schema.SLICES,
    )

    flows, unpaired = _flows(flow_events, tracks, base_ns, track_arr, ts_ns, dur_ns,
                             nested.parent, run_id, rank, trace_id)
    threads, processes = _threads_and_processes(tracks, meta_events, category, track_arr,
                                                run_id, rank, trace_id)
    groups = _process_groups(dist, run_id, rank, trace_id)

    if n:
        end_ns = ts_ns + dur_ns
        start, end = int(ts_ns.min()), int(end_ns.max())
    else:
        start = end = None
    traces = _table(
        {
            "run_id": [run_id],
            "trace_id": [trace_id],
            "rank": [rank],
            "world_size": [dist.world_size],
            "iteration": [source.iteration_hint],
            "min_profiler_step": [steps[0] if steps else None],
            "max_profiler_step": [steps[-1] if steps else None],
            "path": [display_path(source.path)],
            "file_format": [file_format],
            "layout": [source.layout],
            "size_bytes": [source.size_bytes],
            "uncompressed_bytes": [uncompressed_bytes],
            "mtime_ns": [source.mtime_ns],
            "content_hash": [content_hash],
            "engine": ["native"],
            "schema_version": [trace.schemaVersion],
            "base_time_ns": [base_ns],
            "trace_start_ns": [start],
            "trace_end_ns": [end],
            "event_count": [len(events)],
            "slice_count": [n],
            "flow_count": [flows.num_rows],
            "unpaired_flow_events": [unpaired],
            "partial_overlap_count": [int(nested.partial.sum())],
            "backend": [dist.backend],
            "host_name": [trace.host_name],
            "kineto_trace_id": [trace.trace_id],
            "distributed_info": _json_column([trace.distributedInfo], "distributedInfo"),
            "device_properties": _json_column([trace.deviceProperties], "deviceProperties"),
            "ingested_at": [ingested_at],
        },
        schema.TRACES,
    )
    return ParsedTrace(
        trace_id=trace_id,
        rank=rank,
        iteration=source.iteration_hint,
        profiler_steps=tuple(steps),
        tables={
            "slices": slices,
            "flows": flows,
            "threads": threads,
            "processes": processes,
            "process_groups": groups,
            "traces": traces,
        },
    )


def _decode_distributed(raw: msgspec.Raw) -> DistributedInfo:
    if _absent(raw):
        return DistributedInfo()
    try:
        return _DIST_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError("invalid_event", f"distributedInfo: {exc}",
                         "distributedInfo must hold rank, world_size and pg_config "
                         "as PyTorch writes them") from exc


def _flows(flow_events, tracks, base_ns, track_arr, ts_ns, dur_ns, parent, run_id, rank,
           trace_id):
    """Pair ``s``/``f`` events by (category, id), k-th start with k-th finish in
    time order, and bind both ends to slices."""
    usable = [ev for ev in flow_events if ev.ts is not None and ev.id is not None
              and ev.ph != "t"]  # step events carry no slice of their own
    m = len(usable)
    phs, cats, ids, pids, tids, tss, bps = _columns_of(
        usable, ("ph", "cat", "id", "pid", "tid", "ts", "bp"))
    keys: dict[tuple[object, object], int] = {}
    key = np.fromiter(map(keys.setdefault, zip(cats, ids), itertools.count()), dtype=np.int64,
                      count=m)
    is_finish = np.fromiter(map(operator.eq, phs, itertools.repeat("f")), dtype=bool, count=m)
    ts = _to_ns(tss, base_ns, "flow ts")
    track = np.asarray([tracks.setdefault(k, len(tracks)) for k in zip(pids, tids)],
                       dtype=np.int64)
    bind_enclosing = np.fromiter(map(operator.eq, bps, itertools.repeat("e")), dtype=bool,
                                 count=m)

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
    slice_out = bind_flow_endpoints(track_arr, ts_ns, dur_ns, parent, track[out_rows],
                                    ts[out_rows], np.ones(out_rows.size, dtype=bool))
    slice_in = bind_flow_endpoints(track_arr, ts_ns, dur_ns, parent, track[in_rows],
                                   ts[in_rows], bind_enclosing[in_rows])
    bound = (slice_out >= 0) & (slice_in >= 0)
    unpaired = m - 2 * int(bound.sum())
    out_rows, in_rows = out_rows[bound], in_rows[bound]
    k = out_rows.size
    table = _table(
        {
            "run_id": _repeat(run_id, k, pa.string()),
            "rank": _repeat(rank, k, pa.int64()),
            "trace_id": _repeat(trace_id, k, pa.string()),
            "flow_id": [fid if isinstance(fid := ids[i], int) else None
                        for i in out_rows.tolist()],
            "category": [cats[i] for i in out_rows.tolist()],
            "slice_out": pa.array(slice_out[bound]),
            "slice_in": pa.array(slice_in[bound]),
            "ts_out": pa.array(ts[out_rows]),
            "ts_in": pa.array(ts[in_rows]),
        },
        schema.FLOWS,
    )
    return table, unpaired


_GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})


def _threads_and_processes(tracks, meta_events, category, track_arr, run_id, rank, trace_id):
    thread_names: dict[tuple[object, object], str | None] = {}
    thread_sort: dict[tuple[object, object], int | None] = {}
    proc_names: dict[object, str | None] = {}
    proc_labels: dict[object, str | None] = {}
    proc_sort: dict[object, int | None] = {}
    for ev in meta_events:
        args = _decode_args(ev.args)
        if ev.name == "thread_name":
            thread_names[(ev.pid, ev.tid)] = args.name
            tracks.setdefault((ev.pid, ev.tid), len(tracks))
        elif ev.name == "thread_sort_index":
            thread_sort[(ev.pid, ev.tid)] = args.sort_index
        elif ev.name == "process_name":
            proc_names[ev.pid] = args.name
        elif ev.name == "process_labels":
            proc_labels[ev.pid] = args.labels
        elif ev.name == "process_sort_index":
            proc_sort[ev.pid] = args.sort_index

    n_tracks = len(tracks)
    counts = np.bincount(track_arr, minlength=n_tracks) if n_tracks else np.zeros(0, np.int64)
    is_gpu = np.zeros(n_tracks, dtype=bool)
    gpu_slice = pc.fill_null(pc.is_in(category, pa.array(sorted(_GPU_CATEGORIES))), False)
    is_gpu[track_arr[gpu_slice.to_numpy(zero_copy_only=False)]] = True
    keys = list(tracks)  # insertion order == track_id
    threads = _table(
        {
            "run_id": _repeat(run_id, n_tracks, pa.string()),
            "rank": _repeat(rank, n_tracks, pa.int64()),
            "trace_id": _repeat(trace_id, n_tracks, pa.string()),
            "track_id": list(range(n_tracks)),
            "pid": [_str_or_none(pid) for pid, _ in keys],
            "tid": [_str_or_none(tid) for _, tid in keys],
            "thread_name": [thread_names.get(key) for key in keys],
            "thread_sort_index": [thread_sort.get(key) for key in keys],
            "is_gpu": pa.array(is_gpu),
            "slice_count": pa.array(counts.astype(np.int64)),
        },
        schema.THREADS,
    )
    pids = list(dict.fromkeys([pid for pid, _ in keys] + list(proc_names) + list(proc_labels)))
    p = len(pids)
    processes = _table(
        {
            "run_id": _repeat(run_id, p, pa.string()),
            "rank": _repeat(rank, p, pa.int64()),
            "trace_id": _repeat(trace_id, p, pa.string()),
            "pid": [_str_or_none(pid) for pid in pids],
            "process_name": [proc_names.get(pid) for pid in pids],
            "process_labels": [proc_labels.get(pid) for pid in pids],
            "process_sort_index": [proc_sort.get(pid) for pid in pids],
        },
        schema.PROCESSES,
    )
    return threads, processes


def _process_groups(dist: DistributedInfo, run_id: str, rank: int, trace_id: str) -> pa.Table:
    configs = dist.pg_config or []
    g = len(configs)
    return _table(
        {
            "run_id": _repeat(run_id, g, pa.string()),
            "rank": _repeat(rank, g, pa.int64()),
            "trace_id": _repeat(trace_id, g, pa.string()),
            "source": _repeat("pg_config", g, pa.string()),
            "pg_name": [_str_or_none(c.pg_name) for c in configs],
            "pg_desc": [c.pg_desc for c in configs],
            "backend_config": [c.backend_config for c in configs],
            "pg_size": [c.pg_size for c in configs],
            "ranks": [_parse_ranks(c.ranks) for c in configs],
        },
        schema.PROCESS_GROUPS,
    )
