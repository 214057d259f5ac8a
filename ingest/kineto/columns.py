"""A Kineto trace's slice and flow columns, as both native decoders fill them.

:class:`Columns` accumulates Arrow and numpy columns chunk by chunk; the
msgspec decoder (:func:`decode_columns`) fills it from decoded events and the
compiled scanner (:mod:`ingest.kineto.scan`) from its flat buffers, so
everything after decoding (nesting, flows, tables) is shared code. The rules
for the typed args columns (which keys, which categories skip them) and for
category names live here too: the Perfetto engine reads args with the same
rules.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import defaultdict
from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..json_numbers import INT64_MAX
from ..numpy_arrow import arrow_array, distinct
from ..trace_types import TraceError
from .arrow_tables import json_column, raw_lengths, str_or_none, typed_array
from .decode import (
    CHUNK_EVENTS,
    Args,
    Event,
    LazyKinetoFile,
    decode_args,
    decode_args_batch,
    decode_events,
    decode_kineto_lazy,
    parse_ranks,
    to_ns,
)

_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")


_ZERO = msgspec.Raw(b"0")
_SLICE_PHASES = frozenset({"X", "i", "I"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
GPU_CATEGORY_ARRAY = pa.array(sorted(GPU_CATEGORIES))
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
UNTYPED_CATEGORIES = frozenset({"python_function"})
_SLICE_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")


def _columns_of(items: Sequence[object], attrs: Sequence[str]) -> list[list[object]]:
    """One list per attribute: ``map(attrgetter)`` runs in C, ~30 ns per value.

    Per-value attribute access is the floor of this parser's cost; this is the
    cheapest way we measured (zip-transposing tuples and comprehensions are
    1.4-2x slower)."""
    return [list(map(operator.attrgetter(attr), items)) for attr in attrs]


def profiler_steps(names: pa.Array) -> list[int]:
    """Step numbers of the ``ProfilerStep#N`` slices, sorted and unique."""
    candidates = names.filter(pc.fill_null(pc.starts_with(names, "ProfilerStep#"), False))
    return sorted({int(m.group(1)) for nm in candidates.to_pylist()
                   if (m := _PROFILER_STEP.match(nm))})


#: (Args attribute, lake column, type) of each typed args column, in the lake's order.
TYPED_COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
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


def typed_args(category: pa.Array, raws: Sequence[msgspec.Raw],
               lengths: np.ndarray) -> dict[str, pa.Array]:
    """The typed args columns for all slices (NULL where an event lacks the key)."""
    n = len(raws)
    untyped = pc.fill_null(pc.is_in(category, pa.array(sorted(UNTYPED_CATEGORIES))), False)
    rows = np.flatnonzero((lengths > 0) & ~untyped.to_numpy(zero_copy_only=False))
    if rows.size == 0:
        subset: list[msgspec.Raw] = []
    elif rows.size == 1:
        subset = [raws[int(rows[0])]]
    else:
        subset = list(operator.itemgetter(*rows.tolist())(raws))
    return typed_columns(n, rows, decode_args_batch(subset))


def typed_columns(n: int, rows: np.ndarray, decoded: list[Args]) -> dict[str, pa.Array]:
    """Typed args columns of ``n`` slices from the decoded args of slices ``rows``."""
    indices: pa.Array | None = None
    columns: dict[str, pa.Array] = {}
    transposed = _columns_of(decoded, [attr for attr, _, _ in TYPED_COLUMNS])
    for (attr, column, type_), values in zip(TYPED_COLUMNS, transposed):
        if attr == "pg_ranks":
            values = [parse_ranks(v) for v in values]
        elif attr == "pg_name":
            values = [str_or_none(v) for v in values]
        compact = typed_array(values, type_, column)
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


class Columns:
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
        """Append one chunk of msgspec-decoded events (metadata, slices, flow ends)."""
        self.meta.extend((ev.name, ev.pid, ev.tid, decode_args(ev.args))
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
        ts_ns = to_ns(tss, self.base_ns, "ts")
        dur_ns = to_ns([d if p == "X" else _ZERO for p, d in zip(phs, durs)], 0, "dur")
        if dur_ns.size and dur_ns.min() < 0:
            raise TraceError("invalid_event", "a complete ('X') event has a negative dur",
                             "durations must be >= 0")
        if dur_ns.size and bool(np.any(ts_ns > INT64_MAX - dur_ns)):
            # ts and dur each fit, but an end (ts + dur) would wrap around int64.
            raise TraceError("number_out_of_range", "an event ends beyond the int64 "
                             "nanosecond range (ts + dur)", "check the event times in the trace")
        category = modern_categories(typed_array(cats, pa.string(), "category"))
        name = typed_array(names, pa.string(), "name")
        lengths = raw_lengths(raw_args)
        self.ts.append(ts_ns)
        self.dur.append(dur_ns)
        self.track.append(track)
        self.steps.update(profiler_steps(name))
        gpu = pc.fill_null(pc.is_in(category, GPU_CATEGORY_ARRAY), False)
        self.gpu_tracks.update(distinct(track[gpu.to_numpy(zero_copy_only=False)]).tolist())
        arrow = self.arrow
        arrow["phase"].append(pa.array(["X" if p == "X" else "i" for p in phs], pa.string()))
        arrow["category"].append(category)
        arrow["name"].append(name)
        for column, values in typed_args(category, raw_args, lengths).items():
            arrow[column].append(values)
        arrow["args"].append(json_column(raw_args, "args", lengths))

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
        self.flow_ts.append(to_ns(tss, self.base_ns, "flow ts"))
        tracks = self.tracks
        self.flow_track.append(np.fromiter(
            (tracks.setdefault(k, len(tracks)) for k in zip(pids, tids)), dtype=np.int64, count=m))
        self.flow_enclosing.append(np.fromiter(map(operator.eq, bps, itertools.repeat("e")),
                                               dtype=bool, count=m))

    def slice_count(self) -> int:
        """Slices appended so far (complete and instant events)."""
        return sum(a.size for a in self.ts)


def concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """One array of a column's chunks (an empty one of ``dtype`` for none)."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def decode_columns(data: bytes) -> tuple[LazyKinetoFile, Columns, int]:
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
    columns = Columns(trace.baseTimeNanoseconds or 0)
    for offset in range(0, event_count, CHUNK_EVENTS):
        columns.add(decode_events(raws[offset:offset + CHUNK_EVENTS], offset, array_form))
    trace.traceEvents = raws = []  # release the raw event views before nesting
    return trace, columns, event_count
