"""Annotation ranges and the innermost one around each slice, decided per trace at ingest.

An annotation range is a span a user (or a framework) named on a CPU
thread: a Kineto ``user_annotation`` (``torch.profiler.record_function``,
Megatron's and torch's own ranges, ``ProfilerStep#N``), an Nsight NVTX
push/pop range (category ``nvtx`` with event type
:data:`NVTX_PUSH_POP_EVENT_TYPE`; marks and start/end ranges are not pushed
on a thread's stack, so they hold nothing), and any complete CPU slice named
``ProfilerStep#N`` whatever its category (the profiler's own
record_function, which int_profiler_steps reads from the ranges). Kineto's
``gpu_user_annotation`` rows are GPU projections of user annotations, not
ranges.

Ingest already nests every slice of a thread (``parent_id``, ingest/nesting.py:
the deepest slice that wholly holds it, identical slices the earlier
outside), so the tree of ranges and the range around a kernel's launch are
walks up that parent chain. Done here, once per trace in the worker that
parsed it, they cost a pass over arrays; done in the models they took an
ASOF join of every launch against the ranges and a self-join of the ranges
(8% of a full build at 256 ranks x 2 iterations, issue 28's note).

Columns (:data:`ANNOTATION_FIELDS`):

* ``annotation_kind``: ``user_annotation`` or ``nvtx`` on a range, else NULL.
* ``annotation_slice_id``: the innermost range around the slice, along its
  parent chain, itself excluded; for GPU work, the one around its launch
  call (the launch itself when it is a range); NULL outside every range.
  On a range it is the range's parent.
The lake also holds the ranges alone (:func:`annotation_ranges`, table
``annotation_ranges``), a few rows per trace, with each range's lineage: the
slice ids of its ancestor ranges and its own, outermost first (its depth is
the length minus one). The models read the ranges there, not by scanning
every slice of the lake for them (0.52 s against 0.06 s at 256 ranks x 2
iterations, one thread).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .name_match import per_name
from .numpy_arrow import arrow_array, distinct_inverse

#: Nsight's ``NVTX_EVENTS.eventType`` of a push/pop range (ingest/nsys.py
#: writes it into ``args`` as ``event type``).
NVTX_PUSH_POP_EVENT_TYPE = 59

#: A profiler step's name (dbt var ``profiler_step_prefix`` picks steps among the ranges).
PROFILER_STEP_PATTERN = r"^ProfilerStep#[0-9]+$"

ANNOTATION_FIELDS: list[tuple[str, pa.DataType]] = [
    ("annotation_kind", pa.string()),
    ("annotation_slice_id", pa.int64()),
]

#: The lake table ``annotation_ranges``: a trace's ranges, as its slices give them.
ANNOTATION_RANGES = pa.schema([
    ("run_id", pa.string()),
    ("rank", pa.int64()),
    ("trace_id", pa.string()),
    ("slice_id", pa.int64()),
    ("track_id", pa.int64()),
    ("annotation_kind", pa.string()),
    ("annotation_slice_id", pa.int64()),  # the parent range; NULL at the top
    ("name", pa.string()),
    ("ts", pa.int64()),  # absolute ns
    ("dur", pa.int64()),  # ns
    ("annotation_lineage", pa.list_(pa.int64())),  # ancestors and itself, outermost first
    ("annotation_path", pa.string()),  # their names in that order, joined by PATH_SEPARATOR
])

#: Between two names of ``annotation_path``.
PATH_SEPARATOR = " > "


def annotation_context(slices: pa.Table, row_of, is_gpu: np.ndarray,
                       launch_row: np.ndarray) -> dict[str, pa.Array]:
    """The :data:`ANNOTATION_FIELDS` of each slice of one trace.

    ``row_of`` maps slice ids to rows (-1: none); ``launch_row`` is each GPU
    row's launch call row (-1: no launch), as ingest/slice_context.py found it.
    """
    n = slices.num_rows
    kind = _kinds(slices, is_gpu)
    is_range = pc.is_valid(kind).to_numpy(zero_copy_only=False)
    if not is_range.any():
        return {"annotation_kind": kind, "annotation_slice_id": pa.nulls(n, pa.int64())}
    parent = pc.fill_null(slices["parent_id"], -1).to_numpy(zero_copy_only=False)
    parent_row = np.where(parent >= 0, row_of(parent.astype(np.int64, copy=False)), -1)
    enclosing = _enclosing_ranges(parent_row, is_range)

    on_launch = is_gpu & (launch_row >= 0)
    launch = launch_row[on_launch]
    around = enclosing.copy()
    around[is_gpu] = -1
    around[on_launch] = np.where(is_range[launch], launch, enclosing[launch])
    slice_ids = slices["slice_id"].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    found = around >= 0
    return {
        "annotation_kind": kind,
        "annotation_slice_id": arrow_array(np.where(found, slice_ids[np.maximum(around, 0)], 0),
                                        pa.int64(), mask=~found),
    }


def annotation_ranges(slices: pa.Table) -> pa.Table:
    """The ``annotation_ranges`` lake table of one trace's contextualized slices."""
    # The columns kept before the filter: the slices' args are most of their bytes.
    kept = [name for name in ANNOTATION_RANGES.names
            if name not in ("annotation_lineage", "annotation_path")]
    ranges = slices.select(kept).filter(pc.is_valid(slices["annotation_kind"]))
    ids = ranges["slice_id"].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    parents = pc.fill_null(ranges["annotation_slice_id"], -1).to_numpy(zero_copy_only=False)
    parent_row = np.full(ids.size, -1, dtype=np.int64)
    if ids.size:  # each range's parent, a range of the same trace, by slice id
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], parents), ids.size - 1)
        hit = (parents >= 0) & (ids[order][at] == parents)
        parent_row[hit] = order[at][hit]
    columns = {name: ranges[name] for name in kept}
    columns["annotation_lineage"] = _lineages(parent_row, ids)
    columns["annotation_path"] = _paths(parent_row, ranges["name"])
    return pa.table(columns).cast(ANNOTATION_RANGES)


def _kinds(slices: pa.Table, is_gpu: np.ndarray) -> pa.Array:
    """``annotation_kind`` of each slice (module docstring), NULL on every other slice."""
    category = slices["category"].combine_chunks()
    complete_cpu = pc.and_(pc.fill_null(pc.equal(slices["phase"].combine_chunks(), "X"), False),
                           arrow_array(~is_gpu, pa.bool_()))
    is_nvtx = pc.fill_null(pc.starts_with(category, "nvtx"), False)
    user = pc.fill_null(pc.equal(category, "user_annotation"), False)
    push_pop = pc.fill_null(pc.equal(category, "nvtx"), False)
    if pc.any(push_pop).as_py():
        # Every row's args scanned in place, chunk by chunk: cheaper than the copy
        # that blanking the other rows' args first took (0.2 s against 1 s at 1.1 M rows).
        event = pc.extract_regex(slices["args"], r'"event type"\s*:\s*(?P<type>\d+)[,}\s]')
        is_push_pop = pc.equal(pc.struct_field(event, "type"), str(NVTX_PUSH_POP_EVENT_TYPE))
        push_pop = pc.fill_null(pc.and_(push_pop, _one_array(is_push_pop)), False)
    step = pc.fill_null(per_name(slices["name"].combine_chunks(), lambda text:
                                 pc.match_substring_regex(text, PROFILER_STEP_PATTERN)), False)
    is_range = pc.and_(complete_cpu, pc.or_(pc.or_(user, push_pop), step))
    null = pa.scalar(None, pa.string())
    return pc.if_else(is_range, pc.if_else(is_nvtx, "nvtx", "user_annotation"), null)


def _enclosing_ranges(parent_row: np.ndarray, is_range: np.ndarray) -> np.ndarray:
    """Per row: the innermost range strictly above it (-1: none).

    Rows are settled top-down, all rows of one chain length at a time: a
    row's answer is its parent when that is a range, else its parent's. The
    chain length is counted here rather than read from ``depth`` so that the
    walk never depends on the parser's depth agreeing with its parents.
    """
    n = parent_row.size
    enclosing = np.full(n, -1, dtype=np.int64)
    frontier = np.flatnonzero(parent_row < 0)
    children = _children(parent_row)
    while frontier.size:
        rows = children(frontier)
        if not rows.size:
            break
        above = parent_row[rows]
        parent_is_range = is_range[above]
        enclosing[rows] = np.where(parent_is_range, above, enclosing[above])
        frontier = rows
    return enclosing


def _children(parent_row: np.ndarray):
    """A function from rows to all their children's rows (a CSR index over parents)."""
    has_parent = np.flatnonzero(parent_row >= 0)
    order = has_parent[np.argsort(parent_row[has_parent], kind="stable")]
    counts = np.bincount(parent_row[has_parent], minlength=parent_row.size)
    starts = np.concatenate(([0], np.cumsum(counts)))

    def children(rows: np.ndarray) -> np.ndarray:
        lo, hi = starts[rows], starts[rows + 1]
        sizes = hi - lo
        if not sizes.sum():
            return np.empty(0, dtype=np.int64)
        # Positions lo..hi-1 of every row, concatenated, without a Python loop.
        offsets = np.repeat(lo - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        return order[np.arange(sizes.sum()) + offsets]
    return children


#: From this many ranges on, paths are joined per level in Arrow (:func:`_paths_by_level`);
#: below, a walk in Python is faster (its ~1 µs per range against the ~10 Arrow and
#: numpy calls per level: 0.04 ms against several ms for a 40-range DLRM rank).
PATHS_BY_LEVEL_FROM = 4096


def _paths(parent_row: np.ndarray, names: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each range's lineage as names, outermost first, joined by :data:`PATH_SEPARATOR`
    (a NULL name left out, as SQL's string_agg does; NULL when every name is).

    Here rather than in int_annotation_ranges_nested: the model got it by
    exploding every lineage and joining each id back to its name (0.3-0.6 s
    of a 256-rank x 2-iteration build), while a trace's ranges cost one walk,
    parents before children (by depth, never by row order).
    """
    if parent_row.size < PATHS_BY_LEVEL_FROM:
        return _paths_walked(parent_row, _string_array(names).to_pylist())
    return _paths_by_level(parent_row, names)


def _paths_walked(parent_row: np.ndarray, names: list[str | None]) -> pa.Array:
    """:func:`_paths`, one range at a time in Python, parents first."""
    paths: list[str | None] = [None] * parent_row.size
    for row in np.argsort(_depths(parent_row), kind="stable").tolist():
        parent, name = parent_row[row], names[row]
        above = paths[parent] if parent >= 0 else None
        if above is None:
            paths[row] = name
        elif name is None:
            paths[row] = above
        else:
            paths[row] = above + PATH_SEPARATOR + name
    return pa.array(paths, pa.string())


def _paths_by_level(parent_row: np.ndarray, names: pa.ChunkedArray | pa.Array) -> pa.Array:
    """:func:`_paths`, one nesting level at a time in Arrow.

    A level's paths are its distinct (parent path, name) pairs, so strings are
    joined once per distinct path, not per range: NVTX and Megatron ranges
    repeat a few names a million times (the walk took 2.2 s of a 169 MB
    Nsight export's 1.3 M ranges, this ~0.4 s).
    """
    encoded = pc.dictionary_encode(_string_array(names))
    name_id = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    name_text = encoded.dictionary
    depth = _depths(parent_row)
    path_id = np.empty(parent_row.size, dtype=np.int64)  # into the concatenation of `texts`
    texts: list[pa.Array] = []  # the distinct paths of depth 0, 1, ...
    known = 0  # paths in `texts` so far
    for level in range(int(depth.max()) + 1 if depth.size else 0):
        rows = np.flatnonzero(depth == level)
        above = path_id[parent_row[rows]] if level else np.full(rows.size, -1, np.int64)
        # One integer per (parent path, name) pair: both are below len(name_text) + known.
        width = len(name_text) + 1
        keys, inverse = distinct_inverse((above + 1) * width + (name_id[rows] + 1))
        path_id[rows] = known + inverse.reshape(-1)
        own = _lookup(name_text, keys % width - 1)
        if level == 0:
            texts.append(own)
        else:
            parent_text = _lookup(pa.concat_arrays(texts), keys // width - 1)
            # Both, else the one that is not NULL. (null_handling="skip" would say
            # it in one call, but pyarrow 26 drops the rows where both are NULL.)
            joined = pc.binary_join_element_wise(parent_text, own, PATH_SEPARATOR)
            texts.append(pc.coalesce(joined, parent_text, own))
        known += keys.size
    if not texts:
        return pa.array([], pa.string())
    return pa.concat_arrays(texts).take(arrow_array(path_id))


def _lookup(values: pa.Array, index: np.ndarray) -> pa.Array:
    """``values[index]``, NULL where ``index`` is -1."""
    return values.take(arrow_array(index, pa.int64(), mask=index < 0))


def _one_array(values: pa.ChunkedArray) -> pa.Array:
    """``values`` as one array (an empty one of its type when it has no chunks)."""
    return values.combine_chunks() if values.num_chunks else pa.array([], values.type)


def _string_array(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``values`` as one plain ``string`` array (a dictionary or chunked column flattened)."""
    if isinstance(values, pa.ChunkedArray):
        values = _one_array(values)
    return values.cast(pa.string())


def _depths(parent_row: np.ndarray) -> np.ndarray:
    """Each range's number of ancestor ranges; ``parent_row``: its parent's row, -1 at the top."""
    depth = np.zeros(parent_row.size, dtype=np.int64)
    current = parent_row.copy()
    alive = current >= 0
    while alive.any():  # one step up per round, every range at once
        depth[alive] += 1
        current[alive] = parent_row[current[alive]]
        alive = current >= 0
    return depth


def _lineages(parent_row: np.ndarray, slice_ids: np.ndarray) -> pa.Array:
    """Each range's ancestors and itself (slice ids), outermost first; ``parent_row``
    is each range's parent among the ranges (-1: a top range)."""
    n = parent_row.size
    depth = _depths(parent_row)
    offsets = np.concatenate(([0], np.cumsum(depth + 1))).astype(np.int32)
    values = np.empty(int(offsets[-1]), dtype=np.int64)
    rows, position = np.arange(n), offsets[1:] - 1
    while rows.size:
        values[position] = slice_ids[rows]
        rows, position = parent_row[rows], position - 1
        keep = rows >= 0
        rows, position = rows[keep], position[keep]
    return pa.ListArray.from_arrays(arrow_array(offsets), arrow_array(values, pa.int64()))
