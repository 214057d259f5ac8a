"""Columns of a Kineto trace from the compiled scanner (``ingest/_kineto_scan.c``).

Why a second decoder: building columns event by event in Python was most of
ingest's time. The scanner walks the JSON once in C, converts ``ts``/``dur``
to exact integer ns from their digits and interns tracks, flow categories
and flow ids; this module wraps its flat buffers as the same
:class:`ingest.kineto.columns.Columns` the msgspec decoder fills, so
everything after decoding (nesting, flows, tables) is shared code.

The contract: for an input the scanner accepts, the lake tables are
identical to the msgspec decoder's (tests compare both on every shared
trace and on Hypothesis' inputs). Anything the scanner does not fully
understand, every malformed file included, makes :func:`scan_columns`
return ``None``: the caller then runs the msgspec decoder, which also
words the error.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..json_numbers import INT64_MAX, INT64_MIN
from ..numpy_arrow import arrow_array, distinct
from ..trace_types import TraceError
from .columns import (
    GPU_CATEGORY_ARRAY,
    TYPED_COLUMNS,
    UNTYPED_CATEGORIES,
    Columns,
    modern_categories,
    profiler_steps,
    typed_columns,
)
from .decode import CHUNK_EVENTS, Args, KinetoHeader, decode_args, decode_args_batch

try:
    from .. import _kineto_scan
except ImportError:  # built without a C compiler: scan_columns says so, the engine falls back
    _kineto_scan = None

_UNTYPED_CATEGORY_ARRAY = pa.array(sorted(UNTYPED_CATEGORIES))


_HEADER_DECODER = msgspec.json.Decoder(KinetoHeader)


def _strings(parts: tuple[bytes, bytes, bytes]) -> pa.Array:
    """An Arrow string array from the scanner's (int32 offsets, UTF-8 data, validity bytes).

    The scanner has checked the UTF-8, so the buffers are used as they are.
    """
    offsets, data, valid = parts
    n = len(valid)
    present = np.frombuffer(valid, dtype=np.bool_)
    nulls = n - int(present.sum())
    bitmap = arrow_array(present).buffers()[1] if nulls else None
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap,
                                       nulls)


def _i64(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.int64)


def _flags(buffer: bytes) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.bool_)


def _header(data: bytes, spans: list[tuple[str, int, int]]) -> KinetoHeader | None:
    if not spans:
        return KinetoHeader()
    text = b"{" + b",".join(b'"%s":%s' % (key.encode(), data[start:end])
                            for key, start, end in spans) + b"}"
    try:
        return _HEADER_DECODER.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        return None


def scan_columns(data: bytes) -> tuple[KinetoHeader, Columns, int] | None:
    """(header, columns, event count) of a trace, or ``None`` for the msgspec decoder."""
    if _kineto_scan is None:
        raise TraceError("engine_unavailable", "the compiled Kineto scanner is not built "
                         "(no C compiler at install?)", "reinstall with a C compiler "
                         "(pip install -e .), or use --engine native or msgspec")
    out = _kineto_scan.scan(data, CHUNK_EVENTS)
    if out is None or out["event_count"] == 0:
        return None
    header = _header(data, out["header"])
    if header is None:
        return None
    try:
        columns = _columns(out, header.baseTimeNanoseconds or 0)
    except TraceError:
        return None  # e.g. unusable args of a metadata event: msgspec words it
    if columns is None:
        return None
    return header, columns, out["event_count"]


def _shift(values: np.ndarray, base_ns: int) -> np.ndarray | None:
    """``values + base_ns``, or None where a sum leaves int64 (msgspec reports it)."""
    if not base_ns or values.size == 0:
        return values
    if not INT64_MIN - base_ns <= int(values.min()) <= int(values.max()) <= INT64_MAX - base_ns:
        return None
    return values + np.int64(base_ns)


def _columns(out: dict, base_ns: int) -> Columns | None:
    columns = Columns(base_ns)
    ts = _shift(_i64(out["ts"]), base_ns)
    flow_ts = _shift(_i64(out["flow_ts"]), base_ns)
    if ts is None or flow_ts is None:
        return None
    dur = _i64(out["dur"])
    if dur.size and bool(np.any(ts > INT64_MAX - dur)):
        return None  # an end beyond int64: msgspec's path raises the error
    track = _i64(out["track"])

    columns.tracks = {key: i for i, key in enumerate(out["tracks"])}
    columns.ts.append(ts)
    columns.dur.append(dur)
    columns.track.append(track)
    category = modern_categories(_strings(out["cat"]))
    name = _strings(out["name"])
    columns.steps.update(profiler_steps(name))
    gpu = pc.fill_null(pc.is_in(category, GPU_CATEGORY_ARRAY), False)
    columns.gpu_tracks.update(distinct(track[gpu.to_numpy(zero_copy_only=False)]).tolist())
    arrow = columns.arrow
    arrow["phase"].append(pc.if_else(arrow_array(_flags(out["is_x"])), "X", "i"))
    arrow["category"].append(category)
    arrow["name"].append(name)
    args = _strings(out["args"])
    typed = out["typed"]
    if typed is None:  # args the scanner left to msgspec
        typed_arrays = _decoded_typed_columns(category, args)
    else:
        typed_arrays = _scanned_typed_columns(typed)
    for column, values in typed_arrays.items():
        arrow[column].append(values)
    arrow["args"].append(args)

    columns.meta = [(name_, pid, tid, decode_args(raw)) for name_, pid, tid, raw in out["meta"]]
    columns.flow_categories = {c: i for i, c in enumerate(out["flow_categories"])}
    columns.flow_other_ids = {v: i for i, v in enumerate(out["flow_other_ids"])}
    columns.flow_category.append(_i64(out["flow_cat"]))
    columns.flow_id.append(_i64(out["flow_id"]))
    columns.flow_id_is_int.append(_flags(out["flow_id_is_int"]))
    columns.flow_finish.append(_flags(out["flow_finish"]))
    columns.flow_ts.append(flow_ts)
    columns.flow_track.append(_i64(out["flow_track"]))
    columns.flow_enclosing.append(_flags(out["flow_enclosing"]))
    return columns


#: The scanner's key of each typed column (ingest.kineto.decode.Args' JSON names). One call of
#: ``fields``: each resolves Args' string annotations anew (~190 ``compile`` calls,
#: 0.4 ms).
_ARGS_FIELDS = {field.name: field.encode_name for field in msgspec.structs.fields(Args)}
_SCANNED_KEYS = {attr: _ARGS_FIELDS[attr] for attr, _, _ in TYPED_COLUMNS}


def _scanned_typed_columns(typed: dict) -> dict[str, pa.Array]:
    """The typed args columns as the scanner built them (every value decided in C)."""
    columns: dict[str, pa.Array] = {}
    for attr, column, type_ in TYPED_COLUMNS:
        parts = typed[_SCANNED_KEYS[attr]]
        if pa.types.is_integer(type_):
            values, valid = parts
            columns[column] = arrow_array(_i64(values), mask=~_flags(valid))
        elif pa.types.is_list(type_):
            offsets, values, valid = parts
            present = _flags(valid)
            columns[column] = pa.ListArray.from_arrays(
                arrow_array(np.frombuffer(offsets, dtype=np.int32)), arrow_array(_i64(values)),
                type=type_, mask=arrow_array(~present))
        else:
            columns[column] = _strings(parts)
    return columns


def _decoded_typed_columns(category: pa.Array, args: pa.Array) -> dict[str, pa.Array]:
    """The typed args columns by msgspec, where the scanner met args it does not decide
    (an int beyond int64, a duplicate key, ...): the rules live in ingest.kineto.columns."""
    untyped = pc.fill_null(pc.is_in(category, _UNTYPED_CATEGORY_ARRAY), False)
    rows = np.flatnonzero(pc.and_(pc.is_valid(args), pc.invert(untyped))
                          .to_numpy(zero_copy_only=False))
    raws = [msgspec.Raw(text) for text in args.take(arrow_array(rows)).cast(pa.binary())
            .to_pylist()]
    return typed_columns(len(args), rows, decode_args_batch(raws))
