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

Anything malformed raises :class:`ingest.trace_types.TraceError` naming the
problem; the caller adds the file name.
"""

from __future__ import annotations

import itertools
import operator
import os
import re
from collections import defaultdict
from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import schema
from .json_numbers import NotANumber, raws_to_ns
from .nesting import Nesting, bind_flow_endpoints, nest_slices
from .numpy_arrow import arrow_array, distinct
from .trace_types import ParsedTrace, TraceError, TraceFile, display_path

INT64_MAX = 2**63 - 1
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event, with ``args`` left as raw JSON."""

    ph: str = ""
    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    # Raw number text, converted exactly by ingest.json_numbers (a float64 is
    # ~128 ns off at epoch microseconds); empty when absent.
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
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
    # The profiler's record_shapes setting (0/1), read by has_op_shapes.
    record_shapes: msgspec.Raw = msgspec.Raw()


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


class LazyKinetoFile(msgspec.Struct):
    """The top level with each event left as raw JSON, for decoding in chunks."""

    traceEvents: list[msgspec.Raw]  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815
    distributedInfo: msgspec.Raw = msgspec.Raw()  # noqa: N815
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    trace_id: str | None = None
    host_name: str | None = None
    # The profiler's record_shapes setting (0/1), read by has_op_shapes.
    record_shapes: msgspec.Raw = msgspec.Raw()


_LAZY_FILE_DECODER = msgspec.json.Decoder(LazyKinetoFile)
_LAZY_ARRAY_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
#: Events decoded into Python objects at a time: bounds the parser's memory
#: to the Arrow columns plus one chunk, whatever the file size.
CHUNK_EVENTS = 20_000


def _check_not_empty(data: bytes) -> bool:
    """True for a bare event array (``[...]``); raises for an empty file."""
    stripped = data.lstrip()
    if not stripped:
        raise TraceError("empty", "the file is empty", "re-export the trace; the profiler "
                         "may have been killed before it wrote anything")
    return stripped[:1] == b"["


def _decode_error(exc: Exception) -> TraceError:
    """A msgspec/Unicode decoding failure as the TraceError a user should see."""
    if isinstance(exc, UnicodeDecodeError):
        # exc.start counts from the start of the string, not of the file: not worth showing.
        return TraceError("invalid_utf8", f"invalid UTF-8 in a string ({exc.reason})",
                          "JSON must be UTF-8; re-export the trace")
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        # Not Kineto at all: no traceEvents list, or the top level (or the first
        # item of a bare event array) is not an object. A later bad item is a bad event.
        not_kineto = ("missing required field `traceEvents`" in text
                      or text.endswith(("- at `$.traceEvents`", "- at `$[0]`"))
                      or " - at `" not in text)
        if not_kineto:
            return TraceError("not_kineto", f"not a Kineto trace: {text}",
                              "expected a PyTorch profiler trace with a `traceEvents` list")
        if "out of range" in text:
            return TraceError("number_out_of_range", text, "a number does not fit its field")
        return TraceError("invalid_event", text,
                          "the trace does not follow the Chrome trace event format")
    if "truncated" in text:
        return TraceError("truncated", "the JSON ends early (truncated file)",
                          "the copy or the profiler's write was cut short; copy it again")
    return TraceError("invalid_json", f"invalid JSON: {text}", "the file is not valid JSON")


_DECODE_ERRORS = (UnicodeDecodeError, msgspec.ValidationError, msgspec.DecodeError)


def decode_kineto(data: bytes) -> KinetoFile:
    """Decode a whole trace into event objects, mapping every failure to a TraceError."""
    array_form = _check_not_empty(data)
    try:
        if array_form:
            return KinetoFile(traceEvents=_ARRAY_DECODER.decode(data))
        return _FILE_DECODER.decode(data)
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from exc


def decode_kineto_lazy(data: bytes) -> tuple[LazyKinetoFile, bool]:
    """Decode the top level, leaving events as raw JSON; also say if it is a bare array."""
    array_form = _check_not_empty(data)
    try:
        if array_form:
            return LazyKinetoFile(traceEvents=_LAZY_ARRAY_DECODER.decode(data)), True
        return _LAZY_FILE_DECODER.decode(data), False
    except _DECODE_ERRORS as exc:
        raise _decode_error(exc) from exc


_CHUNK_PATH = re.compile(r"- at `\$\[(\d+)\]")


def decode_events(raws: list[msgspec.Raw], offset: int, array_form: bool) -> list[Event]:
    """Decode one chunk of raw events; error paths name the event's index in the file."""
    try:
        return _EVENTS_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except _DECODE_ERRORS as exc:
        if isinstance(exc, msgspec.ValidationError):
            prefix = "$" if array_form else "$.traceEvents"
            text = _CHUNK_PATH.sub(lambda m: f"- at `{prefix}[{int(m.group(1)) + offset}]",
                                   str(exc))
            exc = msgspec.ValidationError(text)
        raise _decode_error(exc) from exc


def _to_ns(values: Sequence[msgspec.Raw], base_ns: int, what: str) -> np.ndarray:
    """Raw JSON numbers in microseconds → exact int64 nanoseconds (plus ``base_ns``).

    The digits are read as text (:mod:`ingest.json_numbers`): float64 would be
    up to ~128 ns off at epoch microseconds (1.7e15 µs needs 19 digits).
    """
    try:
        ns, has_null = raws_to_ns(values, base_ns)
    except NotANumber as exc:
        raise TraceError("invalid_event", f"a {what} value is not a number: {exc}",
                         "every complete or instant event needs numeric ts and dur") from exc
    if has_null:
        raise TraceError("invalid_event", f"a {what} value is missing or not a finite number",
                         "every complete or instant event needs numeric ts and dur")
    try:
        return np.array(ns, dtype=np.int64) if ns else np.zeros(0, dtype=np.int64)
    except OverflowError as exc:
        raise TraceError("number_out_of_range", f"a {what} value exceeds the int64 "
                         "nanosecond range", "check the event times in the trace") from exc


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


_ZERO = msgspec.Raw(b"0")
_SLICE_PHASES = frozenset({"X", "i", "I"})
_GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
_GPU_CATEGORY_ARRAY = pa.array(sorted(_GPU_CATEGORIES))
#: Categories of Kineto traces written before PyTorch 1.13 (HTA reads them too):
#: CUPTI's names then, today's lake names now, so every model sees one spelling.
LEGACY_CATEGORIES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
                     "Runtime": "cuda_runtime", "Operator": "cpu_op"}
#: The launch flow (CPU call -> GPU work) was ``async_gpu`` before it was ``ac2g``.
LEGACY_FLOW_CATEGORIES = {"async_gpu": "ac2g"}
_LEGACY_CATEGORY_ARRAY = pa.array(sorted(LEGACY_CATEGORIES))


def modern_categories(category: pa.Array) -> pa.Array:
    """``category`` with legacy Kineto names mapped to today's (``Kernel`` ->
    ``kernel``, ...); the same array, untouched, when it holds none (every
    current trace: one vectorised membership test)."""
    legacy = pc.is_in(category, value_set=_LEGACY_CATEGORY_ARRAY)
    if not pc.any(legacy).as_py():
        return category
    return pa.array([LEGACY_CATEGORIES.get(c, c) for c in category.to_pylist()], pa.string())
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
    return _typed_columns(n, rows, _decode_args_batch(subset))


def _typed_columns(n: int, rows: np.ndarray, decoded: list[Args]) -> dict[str, pa.Array]:
    """Typed args columns of ``n`` slices from the decoded args of slices ``rows``."""
    indices: pa.Array | None = None
    columns: dict[str, pa.Array] = {}
    transposed = _columns_of(decoded, [attr for attr, _, _ in _TYPED_COLUMNS])
    for (attr, column, type_), values in zip(_TYPED_COLUMNS, transposed):
        if attr == "pg_ranks":
            values = [_parse_ranks(v) for v in values]
        elif attr == "pg_name":
            values = [_str_or_none(v) for v in values]
        compact = _column(values, type_, column)
        if compact.null_count == len(compact):
            # Most typed keys are absent from most slices (CPU traces: all of them).
            columns[column] = pa.nulls(n, type_)
        elif pa.types.is_integer(type_):
            columns[column] = _scatter_ints(compact, rows, n)
        else:
            if indices is None:
                take = np.full(n, -1, dtype=np.int64)
                take[rows] = np.arange(len(rows), dtype=np.int64)
                indices = arrow_array(take, mask=take < 0)
            columns[column] = compact.take(indices)
    return columns


def _scatter_ints(compact: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """An int64 column of ``n`` rows holding ``compact`` at ``rows``, NULL elsewhere
    (numpy scatter: ~10x cheaper than an Arrow ``take`` with a nullable index)."""
    values = np.zeros(n, dtype=np.int64)
    values[rows] = compact.fill_null(0).to_numpy()
    valid = np.zeros(n, dtype=bool)
    valid[rows] = compact.is_valid().to_numpy(zero_copy_only=False)
    return arrow_array(values, mask=~valid)


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
    validity = None if present.all() else arrow_array(present).buffers()[1]
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
    """``value`` ``n`` times (run_id, rank, trace_id on every row), built in C++."""
    return pa.repeat(pa.scalar(value, type=type_), n)


class _Columns:
    """Slice and flow columns accumulated chunk by chunk (Arrow and numpy, compact)."""

    def __init__(self, base_ns: int) -> None:
        self.base_ns = base_ns
        self.tracks: dict[tuple[object, object], int] = {}
        self.flow_categories: dict[str | None, int] = {}
        self.flow_other_ids: dict[object, int] = {}
        self.arrow: dict[str, list[pa.Array]] = defaultdict(list)
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.track: list[np.ndarray] = []
        self.gpu_tracks: set[int] = set()
        self.steps: set[int] = set()
        # (name, pid, tid, args) of metadata events, args decoded at once: an
        # Event's raw args would keep its whole chunk's buffer alive.
        self.meta: list[tuple[str | None, object, object, Args]] = []
        self.flow_category: list[np.ndarray] = []
        self.flow_id: list[np.ndarray] = []
        self.flow_id_is_int: list[np.ndarray] = []
        self.flow_finish: list[np.ndarray] = []
        self.flow_ts: list[np.ndarray] = []
        self.flow_track: list[np.ndarray] = []
        self.flow_enclosing: list[np.ndarray] = []

    def add(self, events: list[Event]) -> None:
        self.meta.extend((ev.name, ev.pid, ev.tid, _decode_args(ev.args))
                         for ev in events if ev.ph == "M")
        self._add_slices([ev for ev in events if ev.ph in _SLICE_PHASES])
        self._add_flows([ev for ev in events if ev.ph in _FLOW_PHASES])

    def _add_slices(self, slice_events: list[Event]) -> None:
        phs, cats, names, pids, tids, tss, durs, raw_args = _columns_of(slice_events,
                                                                          _SLICE_FIELDS)
        track_of = self.tracks.setdefault
        tracks = self.tracks
        track = np.fromiter((track_of(key, len(tracks)) for key in zip(pids, tids)),
                            dtype=np.int64, count=len(slice_events))
        ts_ns = _to_ns(tss, self.base_ns, "ts")
        dur_ns = _to_ns([d if p == "X" else _ZERO for p, d in zip(phs, durs)], 0, "dur")
        if dur_ns.size and dur_ns.min() < 0:
            raise TraceError("invalid_event", "a complete ('X') event has a negative dur",
                             "durations must be >= 0")
        if dur_ns.size and bool(np.any(ts_ns > INT64_MAX - dur_ns)):
            # ts and dur each fit, but an end (ts + dur) would wrap around int64.
            raise TraceError("number_out_of_range", "an event ends beyond the int64 "
                             "nanosecond range (ts + dur)", "check the event times in the trace")
        category = modern_categories(_column(cats, pa.string(), "category"))
        name = _column(names, pa.string(), "name")
        lengths = _lengths(raw_args)
        self.ts.append(ts_ns)
        self.dur.append(dur_ns)
        self.track.append(track)
        self.steps.update(_profiler_steps(name))
        gpu = pc.fill_null(pc.is_in(category, _GPU_CATEGORY_ARRAY), False)
        self.gpu_tracks.update(distinct(track[gpu.to_numpy(zero_copy_only=False)]).tolist())
        arrow = self.arrow
        arrow["phase"].append(pa.array(["X" if p == "X" else "i" for p in phs], pa.string()))
        arrow["category"].append(category)
        arrow["name"].append(name)
        for column, values in _typed_args(category, raw_args, lengths).items():
            arrow[column].append(values)
        arrow["args"].append(_json_column(raw_args, "args", lengths))

    def _add_flows(self, flow_events: list[Event]) -> None:
        # Step ("t") events carry no slice of their own; a flow end without a
        # time or id cannot be placed.
        usable = [ev for ev in flow_events if ev.id is not None and ev.ph != "t"
                  and len(ev.ts) and bytes(ev.ts) != b"null"]
        m = len(usable)
        phs, cats, ids, pids, tids, tss, bps = _columns_of(
            usable, ("ph", "cat", "id", "pid", "tid", "ts", "bp"))
        # (category, id) keys as numbers, not Python tuples kept for the whole file.
        categories = self.flow_categories
        self.flow_category.append(np.fromiter(
            (categories.setdefault(c, len(categories)) for c in cats), dtype=np.int64, count=m))
        is_int = np.fromiter((type(i) is int and -INT64_MAX - 1 <= i <= INT64_MAX for i in ids),
                             dtype=bool, count=m)
        others = self.flow_other_ids
        self.flow_id.append(np.fromiter(
            (i if ok else others.setdefault(i, len(others)) for i, ok in zip(ids, is_int)),
            dtype=np.int64, count=m))
        self.flow_id_is_int.append(is_int)
        self.flow_finish.append(np.fromiter(map(operator.eq, phs, itertools.repeat("f")),
                                            dtype=bool, count=m))
        self.flow_ts.append(_to_ns(tss, self.base_ns, "flow ts"))
        tracks = self.tracks
        self.flow_track.append(np.fromiter(
            (tracks.setdefault(k, len(tracks)) for k in zip(pids, tids)), dtype=np.int64, count=m))
        self.flow_enclosing.append(np.fromiter(map(operator.eq, bps, itertools.repeat("e")),
                                               dtype=bool, count=m))

    def slice_count(self) -> int:
        return sum(a.size for a in self.ts)


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def scanner_available() -> bool:
    """Whether the compiled scanner (``_kineto_scan``, built by ``pip install``) loads.

    ``TRACEHOUSE_DECODER=python`` turns it off (benchmarks, and checking the
    fallback the way an install without a C compiler runs).
    """
    if os.environ.get("TRACEHOUSE_DECODER") == "python":
        return False
    try:
        from . import _kineto_scan  # noqa: F401
    except ImportError:
        return False
    return True


def _decode_columns(data: bytes) -> tuple[LazyKinetoFile, _Columns, int]:
    """The msgspec decoder: the fallback, and the source of every precise error.

    Events are decoded :data:`CHUNK_EVENTS` at a time from raw JSON slices of
    ``data``, and their columns appended to Arrow arrays, so peak memory is
    the input, the output columns and one chunk of Python objects.
    """
    trace, array_form = decode_kineto_lazy(data)
    raws = trace.traceEvents
    if not raws:
        raise TraceError("empty", "the trace has no events", "profile at least one step")
    event_count = len(raws)
    # Events first: a file whose events are not objects is not a trace at all,
    # whatever its (missing) rank says.
    columns = _Columns(trace.baseTimeNanoseconds or 0)
    for offset in range(0, event_count, CHUNK_EVENTS):
        columns.add(decode_events(raws[offset:offset + CHUNK_EVENTS], offset, array_form))
    trace.traceEvents = raws = []  # release the raw event views before nesting
    return trace, columns, event_count


def parse_kineto(data: bytes, source: TraceFile, *, trace_id: str, content_hash: str,
                 uncompressed_bytes: int, file_format: str, ingested_at: object,
                 decoder: str | None = None) -> ParsedTrace:
    """Turn the bytes of one Kineto trace into rows of every per-trace lake table.

    ``decoder``: ``"c"`` (the compiled scanner, :mod:`ingest.kineto_fast`),
    ``"python"`` (msgspec), or ``None`` for the scanner when it is built.
    Both give identical tables; the scanner hands anything unusual (every
    malformed file included) to msgspec, which words the error.
    """
    decoded = None
    if decoder != "python" and (decoder == "c" or scanner_available()):
        from .kineto_fast import scan_columns

        decoded = scan_columns(data)
    if decoded is None:
        decoded = _decode_columns(data)
    del data  # the caller may have handed over its only reference: free the text now
    trace, columns, event_count = decoded

    dist = _decode_distributed(trace.distributedInfo)
    rank, rank_source = resolve_rank(dist, source)
    run_id = source.run_id

    n = columns.slice_count()
    ts_ns = _concat(columns.ts, np.int64)
    dur_ns = _concat(columns.dur, np.int64)
    track_arr = _concat(columns.track, np.int64)
    nested = nest_slices(track_arr, ts_ns, dur_ns)
    steps = sorted(columns.steps)
    arrow = columns.arrow

    def chunked(name: str, type_: pa.DataType) -> pa.ChunkedArray:
        return pa.chunked_array(arrow[name], type=type_)

    slices = _table(
        {
            "run_id": _repeat(run_id, n, pa.string()),
            "rank": _repeat(rank, n, pa.int64()),
            "trace_id": _repeat(trace_id, n, pa.string()),
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
            **{column: chunked(column, type_) for _, column, type_ in _TYPED_COLUMNS},
            "args": chunked("args", pa.string()),
        },
        schema.PARSED_SLICES,
    )

    flows, unpaired = _flows(columns, track_arr, ts_ns, dur_ns, nested, run_id, rank, trace_id)
    threads, processes = _threads_and_processes(columns, track_arr, run_id, rank, trace_id)
    groups = _process_groups(dist, run_id, rank, trace_id, slices)

    if n:
        end_ns = ts_ns + dur_ns
        start, end = int(ts_ns.min()), int(end_ns.max())
    else:
        start = end = None
    traces = traces_row(
        source, trace, dist, engine="native", trace_id=trace_id, rank=rank,
        content_hash=content_hash, uncompressed_bytes=uncompressed_bytes,
        file_format=file_format, ingested_at=ingested_at, steps=steps, start_ns=start,
        end_ns=end, event_count=event_count, slice_count=n, flow_count=flows.num_rows,
        unpaired_flow_events=unpaired, partial_overlap_count=int(nested.partial.sum()),
        op_shapes=has_op_shapes(trace.record_shapes, slices),
    )
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


def traces_row(source: TraceFile, trace, dist: DistributedInfo, *, engine: str, trace_id: str,
               rank: int, content_hash: str, uncompressed_bytes: int, file_format: str,
               ingested_at: object, steps: Sequence[int], start_ns: int | None,
               end_ns: int | None, event_count: int, slice_count: int, flow_count: int,
               unpaired_flow_events: int, partial_overlap_count: int,
               op_shapes: bool) -> pa.Table:
    """The one ``traces`` row of a loaded file; both engines build it here."""
    return _table(
        {
            "run_id": [source.run_id],
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
            "engine": [engine],
            "schema_version": [trace.schemaVersion],
            "base_time_ns": [trace.baseTimeNanoseconds or 0],
            "trace_start_ns": [start_ns],
            "trace_end_ns": [end_ns],
            "event_count": [event_count],
            "slice_count": [slice_count],
            "flow_count": [flow_count],
            "unpaired_flow_events": [unpaired_flow_events],
            "partial_overlap_count": [partial_overlap_count],
            "backend": [dist.backend],
            "host_name": [trace.host_name],
            "kineto_trace_id": [trace.trace_id],
            "distributed_info": _json_column([trace.distributedInfo], "distributedInfo"),
            "device_properties": _json_column([trace.deviceProperties], "deviceProperties"),
            "has_op_shapes": [op_shapes],
            "ingested_at": [ingested_at],
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


def _decode_distributed(raw: msgspec.Raw) -> DistributedInfo:
    if _absent(raw):
        return DistributedInfo()
    try:
        return _DIST_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError("invalid_event", f"distributedInfo: {exc}",
                         "distributedInfo must hold rank, world_size and pg_config "
                         "as PyTorch writes them") from exc


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


def _flows(columns: _Columns, track_arr, ts_ns, dur_ns, nested: Nesting, run_id, rank,
           trace_id):
    """Pair ``s``/``f`` events by (category, id), k-th start with k-th finish in
    time order, and bind both ends to slices (searched in ``nested``'s order)."""
    category = _concat(columns.flow_category, np.int64)
    flow_id = _concat(columns.flow_id, np.int64)
    id_is_int = _concat(columns.flow_id_is_int, bool)
    key = _group_ids(category, id_is_int, flow_id)
    category_names = [LEGACY_FLOW_CATEGORIES.get(c, c) for c in columns.flow_categories]
    is_finish = _concat(columns.flow_finish, bool)
    ts = _concat(columns.flow_ts, np.int64)
    track = _concat(columns.flow_track, np.int64)
    bind_enclosing = _concat(columns.flow_enclosing, bool)
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
    table = _table(
        {
            "run_id": _repeat(run_id, k, pa.string()),
            "rank": _repeat(rank, k, pa.int64()),
            "trace_id": _repeat(trace_id, k, pa.string()),
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




def _threads_and_processes(columns: _Columns, track_arr, run_id, rank, trace_id):
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
            "is_gpu": arrow_array(is_gpu),
            "slice_count": arrow_array(counts.astype(np.int64)),
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


def _process_groups(dist: DistributedInfo, run_id: str, rank: int, trace_id: str,
                    slices: pa.Table | None = None) -> pa.Table:
    """Groups this rank belongs to: ``distributedInfo.pg_config``, then any group
    that only the comm args name (``Process Group Name``/``Description``/``Ranks``
    on ``record_param_comms`` and NCCL kernels), e.g. traces without pg_config."""
    rows = [
        ("pg_config", _str_or_none(c.pg_name), c.pg_desc, c.backend_config, c.pg_size,
         _parse_ranks(c.ranks))
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
    return _table(
        {
            "run_id": _repeat(run_id, g, pa.string()),
            "rank": _repeat(rank, g, pa.int64()),
            "trace_id": _repeat(trace_id, g, pa.string()),
            "source": source,
            "pg_name": name,
            "pg_desc": desc,
            "backend_config": backend,
            "pg_size": size,
            "ranks": ranks,
        },
        schema.PROCESS_GROUPS,
    )
