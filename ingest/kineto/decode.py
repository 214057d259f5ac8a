"""msgspec's reading of a Kineto (PyTorch profiler) Chrome-trace JSON file.

Why msgspec: typed decoding into ``Struct`` classes is several times faster
than ``json``/``orjson`` into dicts and keeps ``args`` as raw JSON bytes
(``msgspec.Raw``) until we need them, so the common case (hundreds of
thousands of ``cpu_op``/``python_function`` events) costs one pass.

This module holds the file's typed shape (:class:`KinetoFile`, :class:`Event`,
:class:`Args`, :class:`DistributedInfo`), the decoders, and the wording of
every decoding failure as a :class:`ingest.trace_types.TraceError`: the
pure-Python engine decodes whole traces with it, the compiled scanner hands
it what it does not understand, and the Perfetto engine reads the file's
metadata through it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import numpy as np

from ..json_numbers import NotANumber, raws_to_ns
from ..trace_types import TraceError


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


class KinetoHeader(msgspec.Struct):
    """The top-level keys besides ``traceEvents``: what a trace's ``traces`` row keeps.

    The compiled scanner decodes only these (it reads the events itself); the
    file types below add the events, as objects or as raw JSON.
    """

    schemaVersion: int | None = None  # noqa: N815 (Kineto's key)
    distributedInfo: msgspec.Raw = msgspec.Raw()  # noqa: N815 (empty when absent)
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    trace_id: str | None = None
    host_name: str | None = None
    # The profiler's record_shapes setting (0/1), read by has_op_shapes.
    record_shapes: msgspec.Raw = msgspec.Raw()


class KinetoFile(KinetoHeader, kw_only=True):
    """The top-level Kineto object; only what the lake keeps is decoded."""

    traceEvents: list[Event]  # noqa: N815 (Kineto's key)


class DistributedInfo(msgspec.Struct):
    """``distributedInfo``: the rank, the world and the process groups PyTorch wrote."""

    backend: str | None = None
    rank: int | None = None
    world_size: int | None = None
    pg_config: list[PgConfig] | None = None


class PgConfig(msgspec.Struct):
    """One process group of ``distributedInfo.pg_config``."""

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
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[Args])


class LazyKinetoFile(KinetoHeader, kw_only=True):
    """The top level with each event left as raw JSON, for decoding in chunks."""

    traceEvents: list[msgspec.Raw]  # noqa: N815


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


def to_ns(values: Sequence[msgspec.Raw], base_ns: int, what: str) -> np.ndarray:
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


def parse_ranks(value: str | list[int] | None) -> list[int] | None:
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


def _absent(raw: msgspec.Raw) -> bool:
    return len(raw) == 0 or bytes(raw) == b"null"


def decode_args(raw: msgspec.Raw) -> Args:
    """One event's typed args keys; a key of an unexpected type is left out (NULL), and
    only args that are not a JSON object at all raise a TraceError."""
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


def decode_args_batch(raws: list[msgspec.Raw]) -> list[Args]:
    """Decode many args objects in one call (per-call overhead dominates otherwise)."""
    if not raws:
        return []
    try:
        return _ARGS_LIST_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        # One by one: the fallback keeps events whose typed keys have odd types
        # and names the problem of the first unusable args.
        return [decode_args(raw) for raw in raws]


def decode_distributed(raw: msgspec.Raw) -> DistributedInfo:
    """``distributedInfo`` decoded (empty when absent); a TraceError where it has another
    shape than PyTorch's."""
    if _absent(raw):
        return DistributedInfo()
    try:
        return _DIST_DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise TraceError("invalid_event", f"distributedInfo: {exc}",
                         "distributedInfo must hold rank, world_size and pg_config "
                         "as PyTorch writes them") from exc
