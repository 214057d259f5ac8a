"""The context of each slice that its own trace decides, added as the lake writes it.

Every later step needs to know, of a slice: is it GPU work or on a CPU
thread, which CPU call launched it (for GPU work), and, for a ``with_stack``
frame, its kind, file and function. None of that needs another trace, and
ingest already holds the whole trace, so it is computed here, once, in the
worker process that parsed the file (in parallel with the other files),
instead of by the first model of every build: there it took three scans of
the lake and the launch joins, a third of a full build's serial start
(benchmarks/README.md). What needs the run (iterations from the profiler
steps, groups, ranks) stays in the models.

The rules, which models/intermediate/slices/int_slices_contextualized.sql
documents for users:

* ``is_gpu``: the slice's track is a GPU stream (``threads.is_gpu``).
* Frames: ``path/file.py(N): func`` names are ``python`` frames, split into
  ``frame_file`` (before the first ``(``) and ``frame_function`` (after the
  first ``): ``); ``nn.Module: Name`` names are ``module`` frames.
* Launch of GPU work: the CPU slice the ``ac2g`` flow into it starts at (the
  smallest such slice id when several do), else the CPU slice of the trace
  with the same correlation id (the smallest slice id). The correlation
  match also wins over a flow whose source has a correlation id other than
  the work's: some Kineto traces bind an ``ac2g`` flow to a neighbouring
  call (dlrm_8rank: a memset's flow starts at ``cudaPeekAtLastError``, its
  correlation names ``cudaMemsetAsync``). CUDA graphs share one correlation
  id across many kernels, which is why the flow comes first. A launch that
  is not a CPU slice of the trace is no launch. The launch's slice id, name,
  track, start and duration are copied onto the GPU work, with
  ``launch_source`` (``flow`` or ``correlation``).
* ``has_role``: the slice is one the models read as a slice of its own
  (int_slices_contextualized): GPU work, a Python or module frame, a
  ``c10d::*`` or ``gloo:*`` collective, a ``ProfilerStep#N`` step. The
  lake writes these rows first, in their own row group
  (ingest/lake.py), so that model's scan skips the other half of the
  slices (plain CPU ops and runtime calls) by the column's statistics
  instead of decoding them: 1.65 -> 1.08 CPU s at 256 ranks x 2
  iterations, one thread.
* Annotation ranges (Kineto user annotations, Nsight NVTX push/pop ranges)
  and the innermost one around each slice and each launch, along ingest's
  parent chain: ingest/annotation_context.py.

Written with numpy and pyarrow, never DuckDB: ingest workers do not import
DuckDB (~40 MB of RSS and ~0.15 s each, see ``lake.read_manifest``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .annotation_context import ANNOTATION_FIELDS, PROFILER_STEP_PATTERN, annotation_context
from .name_match import per_name
from .numpy_arrow import arrow_array

#: The flow category of a CPU launch -> GPU work edge (Kineto's and the Nsight loader's).
LAUNCH_FLOW_CATEGORY = "ac2g"

#: Columns this module adds to a parsed ``slices`` table, in order.
CONTEXT_FIELDS: list[tuple[str, pa.DataType]] = [
    ("is_gpu", pa.bool_()),  # the slice's track is a GPU stream
    ("frame_kind", pa.string()),  # python | module | NULL
    ("frame_file", pa.string()),  # python frames: before the first "("
    ("frame_function", pa.string()),  # python frames: after the first "): "
    ("launch_slice_id", pa.int64()),  # GPU work: the CPU slice that launched it
    ("launch_source", pa.string()),  # flow | correlation
    ("launch_name", pa.string()),
    ("launch_track_id", pa.int64()),
    ("launch_ts", pa.int64()),  # absolute ns
    ("launch_dur", pa.int64()),  # ns
    ("has_role", pa.bool_()),  # GPU work, a frame, a collective or a profiler step
    *ANNOTATION_FIELDS,  # ingest/annotation_context.py
]


def with_context(slices: pa.Table, flows: pa.Table, threads: pa.Table) -> pa.Table:
    """``slices`` (one trace, the parsers' columns) with :data:`CONTEXT_FIELDS` appended."""
    is_gpu = _gpu_rows(slices, threads)
    columns = {"is_gpu": arrow_array(is_gpu, pa.bool_())}
    columns.update(_frames(slices["name"]))
    row_of = _row_lookup(_numpy(slices["slice_id"]))
    launches, launch_row = _launches(slices, flows, is_gpu, row_of)
    columns.update(launches)
    columns["has_role"] = _has_role(slices["name"], is_gpu, columns["frame_kind"])
    columns.update(annotation_context(slices, row_of, is_gpu, launch_row))
    for name, type_ in CONTEXT_FIELDS:
        slices = slices.append_column(pa.field(name, type_), columns[name].cast(type_))
    return slices


def _has_role(names: pa.ChunkedArray, is_gpu: np.ndarray,
              frame_kind: pa.ChunkedArray) -> pa.ChunkedArray:
    """``has_role`` (module docstring) of each slice."""
    def is_named(text: pa.Array) -> pa.Array:
        collective = pc.or_(pc.starts_with(text, "c10d::"), pc.starts_with(text, "gloo:"))
        return pc.or_(collective, pc.match_substring_regex(text, PROFILER_STEP_PATTERN))

    named = pc.fill_null(per_name(names, is_named), False)
    return pc.or_(pc.or_(arrow_array(is_gpu, pa.bool_()), pc.is_valid(frame_kind)), named)


def _numpy(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """An int64 column as numpy, NULLs as ``fill`` (callers keep the validity apart)."""
    return pc.fill_null(column, fill).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _valid(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.is_valid(column).to_numpy(zero_copy_only=False)


def _gpu_rows(slices: pa.Table, threads: pa.Table) -> np.ndarray:
    """Whether each slice's track is a GPU stream (a track without a thread row: no)."""
    where = pc.index_in(slices["track_id"], value_set=threads["track_id"].combine_chunks())
    gpu = pc.fill_null(pc.take(threads["is_gpu"], where), False)
    return gpu.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _frames(names: pa.ChunkedArray) -> dict[str, pa.ChunkedArray]:
    """frame_kind, frame_file and frame_function of each slice name.

    Computed once per distinct name of each chunk, then taken for every
    slice: a trace repeats its frames every step and microbatch (the 53 MB
    benchmark trace: 4x faster than on every slice). Chunk by chunk, as the
    parsers built them, so no array outgrows Arrow's 2 GiB string offsets.
    """
    parts: dict[str, list[pa.Array]] = {"frame_kind": [], "frame_file": [], "frame_function": []}
    for chunk in names.chunks or [pa.array([], pa.string())]:
        encoded = pc.dictionary_encode(chunk)
        for column, values in _frame_parts(encoded.dictionary).items():
            parts[column].append(pc.take(values, encoded.indices))
    return {column: pa.chunked_array(arrays, pa.string()) for column, arrays in parts.items()}


def _frame_parts(distinct: pa.Array) -> dict[str, pa.Array]:
    """The frame columns of each of ``distinct`` names."""
    python = pc.fill_null(pc.match_substring(distinct, "): "), False)
    module = pc.and_(pc.invert(python),
                     pc.fill_null(pc.starts_with(distinct, "nn.Module: "), False))
    null = pa.scalar(None, pa.string())
    kind = pc.if_else(python, "python", pc.if_else(module, "module", null))
    before_paren = pc.list_element(pc.split_pattern(distinct, "(", max_splits=1), 0)
    file_ = pc.if_else(python, pc.if_else(pc.match_substring(distinct, "("), before_paren, ""),
                       null)
    frames_only = pc.if_else(python, distinct, "): ")  # every name split in two
    after = pc.list_element(pc.split_pattern(frames_only, "): ", max_splits=1), 1)
    function = pc.if_else(python, after, null)
    return {"frame_kind": kind, "frame_file": file_, "frame_function": function}


def _launches(slices: pa.Table, flows: pa.Table, is_gpu: np.ndarray,
              row_of) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The launch columns of each slice (set on GPU work whose launch was found, else NULL)
    and each row's launch row (-1: none)."""
    n = slices.num_rows
    slice_ids = _numpy(slices["slice_id"])
    correlation = _numpy(slices["correlation"])
    has_correlation = _valid(slices["correlation"])

    # The ac2g flows, by the rows of their two ends (-1: no slice of the trace).
    launch_flows = flows.filter(pc.equal(flows["category"], LAUNCH_FLOW_CATEGORY))
    flow_out = _numpy(launch_flows["slice_out"])
    flow_in = _numpy(launch_flows["slice_in"])
    valid_flow = _valid(launch_flows["slice_out"]) & _valid(launch_flows["slice_in"])
    flow_out, flow_in = flow_out[valid_flow], flow_in[valid_flow]
    out_row, in_row = row_of(flow_out), row_of(flow_in)

    # CPU slices that can launch: those with a correlation id and the flows' sources.
    flow_source = np.zeros(n, dtype=bool)
    flow_source[out_row[out_row >= 0]] = True
    launcher = ~is_gpu & (has_correlation | flow_source)

    # By flow, per GPU row: the smallest source slice id (its row, -1 when
    # the trace has no such slice), and the smallest correlation id among the
    # sources that are launch candidates.
    has_flow = np.zeros(n, dtype=bool)
    flow_launch = np.full(n, -1, dtype=np.int64)
    flow_corr = np.zeros(n, dtype=np.int64)
    flow_has_corr = np.zeros(n, dtype=bool)
    keep = in_row >= 0
    if keep.any():
        targets, sources, source_rows = in_row[keep], flow_out[keep], out_row[keep]
        order = np.lexsort((sources, targets))
        targets, source_rows = targets[order], source_rows[order]
        starts = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
        heads = targets[starts]
        has_flow[heads] = True
        flow_launch[heads] = source_rows[starts]
        candidate = source_rows >= 0
        candidate[candidate] = (launcher & has_correlation)[source_rows[candidate]]
        values = np.where(candidate, correlation[np.maximum(source_rows, 0)],
                          np.iinfo(np.int64).max)
        flow_corr[heads] = np.minimum.reduceat(values, starts)
        flow_has_corr[heads] = np.logical_or.reduceat(candidate, starts)

    # By correlation id, per GPU row: the CPU candidate with the same id and the smallest slice id.
    corr_launch = np.full(n, -1, dtype=np.int64)
    cpu_rows = np.flatnonzero(launcher & has_correlation)
    gpu_rows = np.flatnonzero(is_gpu & has_correlation)
    if cpu_rows.size and gpu_rows.size:
        order = np.lexsort((slice_ids[cpu_rows], correlation[cpu_rows]))
        cpu_rows = cpu_rows[order]
        keys = correlation[cpu_rows]
        first = np.r_[True, keys[1:] != keys[:-1]]
        keys, cpu_rows = keys[first], cpu_rows[first]
        at = np.minimum(np.searchsorted(keys, correlation[gpu_rows]), keys.size - 1)
        hit = keys[at] == correlation[gpu_rows]
        corr_launch[gpu_rows[hit]] = cpu_rows[at[hit]]

    # The flow wins unless the correlation match disagrees with its source's id.
    use_flow = has_flow & (
        (corr_launch < 0) | ~flow_has_corr | (flow_corr == correlation) & has_correlation
    )
    launch_row = np.where(use_flow, flow_launch, corr_launch)
    found = is_gpu & (launch_row >= 0)
    found[found] = launcher[launch_row[found]]
    rows = np.where(found, launch_row, 0)
    mask = ~found
    indices = arrow_array(rows, pa.int64(), mask=mask)  # NULL: no launch, so NULL columns
    flow_or_not = arrow_array(use_flow.astype(np.int8), mask=mask)
    launch_sources = pa.array(["correlation", "flow"]).take(flow_or_not)

    def launch_of(column: str) -> pa.ChunkedArray:
        return pc.take(slices[column], indices)

    return {
        "launch_slice_id": arrow_array(slice_ids[rows], pa.int64(), mask=mask),
        "launch_source": launch_sources,
        "launch_name": launch_of("name"),
        "launch_track_id": launch_of("track_id"),
        "launch_ts": launch_of("ts"),
        "launch_dur": launch_of("dur"),
    }, np.where(found, launch_row, -1)


def _row_lookup(slice_ids: np.ndarray):
    """A function from slice ids to their rows (-1 where the trace has no such slice)."""
    n = slice_ids.size
    if n and slice_ids[0] == 0 and slice_ids[-1] == n - 1 and (np.diff(slice_ids) == 1).all():
        def lookup(ids: np.ndarray) -> np.ndarray:  # the parsers' usual ids: 0..n-1
            return np.where((ids >= 0) & (ids < n), ids, -1)
        return lookup
    order = np.argsort(slice_ids, kind="stable")
    sorted_ids = slice_ids[order]

    def lookup(ids: np.ndarray) -> np.ndarray:
        if not n:
            return np.full(ids.size, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(sorted_ids, ids), n - 1)
        return np.where(sorted_ids[at] == ids, order[at], -1)
    return lookup
