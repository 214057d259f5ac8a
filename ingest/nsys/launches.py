"""What a GPU's device rows need of its CPU rows: the CUDA calls that launch them, and the
NVTX range around each call, kept as numbers between the streamer's two passes.

Why: the streaming loader (:mod:`.write`) reads a GPU's CPU rows first and its
device work after, and each device row's context names the call that launched
it (by ``ac2g`` flow or correlation id) and the annotation range around that
call. Those calls are about one per kernel (770 k per GPU of a 713 MB export);
kept as Arrow slices of the CPU batches they took ~200 MiB, as integer columns
and codes of their few distinct names ~40 MiB. A device batch gets back, as
slice rows, only the calls and ranges its own rows need, so that
:func:`ingest.slice_context.with_context` decides the context by its one set
of rules (:meth:`Launches.for_rows`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..slice_context import LAUNCH_FLOW_CATEGORY
from .parse import stand_in_args

#: Integer columns a kept row keeps (NULL as -1, validity apart where NULL can occur).
_INTS = ("slice_id", "ts", "dur", "track_id", "correlation", "parent_id", "event_type")
#: Text columns a kept row keeps as codes into the distinct values seen.
_TEXTS = ("phase", "category", "name")


class _Rows:
    """Slice rows kept as integer columns and codes of their text (:data:`_INTS`,
    :data:`_TEXTS`), restored as rows of ``table_schema`` on demand."""

    def __init__(self, table_schema: pa.Schema) -> None:
        self.schema = table_schema
        self._ints: dict[str, list[np.ndarray]] = {name: [] for name in _INTS}
        self._valid: dict[str, list[np.ndarray]] = {"correlation": [], "parent_id": [],
                                                    "event_type": []}
        self._codes: dict[str, list[np.ndarray]] = {name: [] for name in _TEXTS}
        self._texts: dict[str, dict[str, int]] = {name: {} for name in _TEXTS}
        self.columns: dict[str, np.ndarray] = {}

    def add(self, rows: pa.Table, parent: pa.ChunkedArray, event_type: pa.ChunkedArray) -> None:
        """Keep ``rows`` (slice columns), with ``parent`` as their parent and the NVTX
        ``event_type`` their stand-in ``args`` came from."""
        given = {"parent_id": parent, "event_type": event_type}
        for name in _INTS:
            column = given.get(name, rows[name] if name in rows.column_names else None)
            self._ints[name].append(_ints(column, -1))
            if name in self._valid:
                self._valid[name].append(pc.is_valid(column).to_numpy(zero_copy_only=False))
        for name in _TEXTS:
            self._codes[name].append(self._encode(name, rows[name]))

    def _encode(self, name: str, column: pa.ChunkedArray) -> np.ndarray:
        """Codes of ``column``'s values (never NULL) in this store's table of them."""
        encoded = pc.dictionary_encode(column.combine_chunks() if column.num_chunks
                                       else pa.array([], pa.string()))
        known = self._texts[name]
        remap = np.array([known.setdefault(text, len(known))
                          for text in encoded.dictionary.to_pylist()], dtype=np.int32)
        return remap[encoded.indices.to_numpy(zero_copy_only=False)] if remap.size else \
            np.zeros(len(column), dtype=np.int32)

    def seal(self) -> None:
        """Join what was added into one array per column (the parts are dropped)."""
        for parts, suffix, dtype in ((self._ints, "", np.int64), (self._valid, "_valid", bool),
                                     (self._codes, "", np.int32)):
            for name, arrays in parts.items():
                self.columns[name + suffix] = (np.concatenate(arrays) if arrays
                                               else np.zeros(0, dtype=dtype))
                arrays.clear()
        self._text_values = {name: pa.array(list(known), pa.string())
                             for name, known in self._texts.items()}

    def table(self, rows: np.ndarray) -> pa.Table:
        """Rows ``rows`` (positions, after :meth:`seal`) as ``schema`` rows."""
        at = self.columns
        n = rows.size

        def ints(name: str) -> pa.Array:
            values = at[name][rows]
            valid = at.get(f"{name}_valid")
            return pa.array(values, pa.int64(), mask=None if valid is None else ~valid[rows])

        event_type = ints("event_type")
        columns = {name: ints(name) for name in ("slice_id", "ts", "dur", "track_id",
                                                 "correlation", "parent_id")}
        columns |= {name: self._text_values[name].take(pa.array(at[name][rows]))
                    for name in _TEXTS}
        columns |= {"args": stand_in_args(pa.chunked_array([event_type])).combine_chunks(),
                    "device": pa.nulls(n, pa.int64()), "stream": pa.nulls(n, pa.int64()),
                    "depth": pa.array(np.zeros(n, dtype=np.int64)),
                    "is_partial_overlap": pa.array(np.zeros(n, dtype=bool))}
        return pa.table([columns[name] for name in self.schema.names], schema=self.schema)


class Launches:
    """The calls that launch a GPU's work and the ranges around them, added batch by batch
    from the CPU side (:meth:`add`), then asked per device batch (:meth:`for_rows`).

    ``correlations``: the GPU's device rows' correlation ids, sorted; only calls with
    one of them are kept. ``table_schema``: the slice columns the context reads.
    """

    def __init__(self, correlations: np.ndarray, table_schema: pa.Schema) -> None:
        self._correlations = correlations
        self._calls = _Rows(table_schema)
        self._ranges = _Rows(table_schema)
        self._last_ranges = np.zeros(0, dtype=np.int64)

    def add(self, context: pa.Table, first: int) -> None:
        """From contextualized CPU slices ``context`` (rows from ``first`` on are new, the
        rows before them carried), keep the new calls whose correlation id the GPU's work
        carries, and the ranges around them."""
        mine = context.slice(first)
        corr = mine["correlation"]
        launching = pc.is_valid(corr).to_numpy(zero_copy_only=False) & find_sorted(
            self._correlations, _ints(corr, -1))[1]
        if not launching.any():
            return
        calls = mine.filter(pa.array(launching))
        around = calls["annotation_slice_id"]
        # As context rows: a call's parent is the range around it (so the context's walk
        # up the parent chain finds that range), a range has none.
        self._calls.add(calls, around, _event_types(calls))
        wanted = np.unique(_ints(pc.drop_null(around)))
        wanted = wanted[~find_sorted(self._last_ranges, wanted)[1]]  # kept with the last batch
        ranges = context.filter(pc.is_in(context["slice_id"], value_set=pa.array(wanted)))
        self._ranges.add(ranges, pa.nulls(ranges.num_rows, pa.int64()), _event_types(ranges))
        # The ranges still in ``context`` (a sort of its ids, which come in order: ~linear).
        present = find_sorted(np.sort(_ints(context["slice_id"]), kind="stable"),
                              self._last_ranges)[1]
        self._last_ranges = np.union1d(wanted, self._last_ranges[present])

    def seal(self) -> None:
        """Done adding: index the calls by correlation id, the ranges by slice id."""
        self._calls.seal()
        self._ranges.seal()
        calls = self._calls.columns
        ids, corr, ts = calls["slice_id"], calls["correlation"], calls["ts"]
        runtime_code = self._calls._texts["category"].get("cuda_runtime", -1)  # noqa: SLF001
        not_runtime = calls["category"] != runtime_code
        # The call a flow starts at: the runtime call first, then the earliest, then the
        # smallest slice id (the call Kineto links); and the smallest slice id per
        # correlation id, which the context falls back on without a flow.
        self._flow_keys, self._flow_rows = _first_per_key(
            corr, np.lexsort((ids, ts, not_runtime, corr)))
        self._id_keys, self._id_rows = _first_per_key(corr, np.lexsort((ids, corr)))
        range_ids = self._ranges.columns["slice_id"]
        self._range_ids, self._range_rows = np.unique(range_ids, return_index=True)

    def for_rows(self, rows: pa.Table, first_flow: int, constants: dict[str, pa.Scalar]
                 ) -> tuple[pa.Table, pa.Table]:
        """The ``ac2g`` flows into device ``rows`` (flow ids from ``first_flow``;
        ``constants``: run_id, rank, trace_id) and, as slice rows, the calls and
        ranges their context needs."""
        corr = _ints(rows["correlation"], -1)
        valid = pc.is_valid(rows["correlation"]).to_numpy(zero_copy_only=False)
        at, hit = find_sorted(self._flow_keys, corr)
        flowing = valid & hit & (corr != 0)
        out = self._flow_rows[at[flowing]]
        k = int(flowing.sum())
        calls = self._calls.columns
        flows = pa.table({
            **{name: pa.repeat(constants[name], k) for name in ("run_id", "rank", "trace_id")},
            "flow_id": pa.array(np.arange(first_flow, first_flow + k, dtype=np.int64)),
            "category": pa.repeat(pa.scalar(LAUNCH_FLOW_CATEGORY), k),
            "slice_out": pa.array(calls["slice_id"][out]),
            "slice_in": pa.array(_ints(rows["slice_id"])[flowing]),
            "ts_out": pa.array(calls["ts"][out]),
            "ts_in": pa.array(_ints(rows["ts"])[flowing])}, schema=schema.FLOWS)
        by_id, id_hit = find_sorted(self._id_keys, corr)
        needed = np.unique(np.concatenate([out, self._id_rows[by_id[valid & id_hit]]]))
        around = calls["parent_id"][needed][calls["parent_id_valid"][needed]]
        where, found = find_sorted(self._range_ids, np.unique(around))
        context_rows = pa.concat_tables([self._calls.table(needed),
                                         self._ranges.table(self._range_rows[where[found]])])
        return flows, context_rows


def _event_types(rows: pa.Table) -> pa.ChunkedArray:
    """The NVTX event type in each row's stand-in ``args`` (NULL where it has none)."""
    found = pc.extract_regex(rows["args"], r'^\{"event type": (?P<type>-?\d+)\}$')
    return pc.cast(pc.struct_field(found, "type"), pa.int64())


def find_sorted(sorted_keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value, its position among ``sorted_keys`` (clipped) and whether it is there."""
    if not sorted_keys.size:
        return np.zeros(values.size, dtype=np.int64), np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), sorted_keys.size - 1)
    return at, sorted_keys[at] == values


def _first_per_key(keys: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (sorted) and, of each, the first row in ``order`` (sorted by key)."""
    ordered = keys[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]] if ordered.size else np.zeros(0, bool)
    return ordered[first], order[first]


def _ints(column: pa.ChunkedArray | pa.Array | None, fill: int = 0) -> np.ndarray:
    """An integer column as int64 numpy, NULL as ``fill``."""
    if column is None:
        return np.zeros(0, dtype=np.int64)
    return pc.fill_null(column, fill).to_numpy(zero_copy_only=False).astype(np.int64,
                                                                          copy=False)
