"""Annotation ranges and the range around each slice, as ingest writes them.

ingest/annotation_context.py. Hand-made traces, nested by ingest's own
nesting (ingest/nesting.py) as the parsers nest them, pin each rule: ranges
nest through frames and operators, identical ranges nest the earlier
outside, a launch straddling a range's end belongs to the range around
both, a launch on another thread sees only its own thread's ranges, NVTX
marks and start/end ranges are no push/pop ranges, GPU work takes its
launch's range, profiler steps are ranges whatever their category. Real
traces check the same columns against independent readings of the files
(tests/test_annotation_ranges.py, tests/test_nsys_views.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tracehouse.ingest.annotation_context import (
    ANNOTATION_RANGES,
    PATH_SEPARATOR,
    PATHS_BY_LEVEL_FROM,
    _paths,
    _paths_by_level,
    _paths_walked,
    annotation_ranges,
)
from tracehouse.ingest.nesting import nest_slices
from tracehouse.ingest.schema import LAKE_TABLES, PARSED_SLICES
from tracehouse.ingest.slice_context import with_context

CPU, GPU, OTHER_CPU = 1, 2, 3


def _trace(rows: list[tuple], ids: dict[int, int]) -> dict[int, dict]:
    """with_context on ``rows`` (id, track, category, name, ts, end, correlation, args),
    nested as a parser nests them, slice ids renumbered through ``ids``; by original id."""
    track = np.array([r[1] for r in rows], dtype=np.int64)
    ts = np.array([r[4] for r in rows], dtype=np.int64)
    dur = np.array([r[5] - r[4] for r in rows], dtype=np.int64)
    nested = nest_slices(track, ts, dur)
    slices = [{
        "run_id": "r", "rank": 0, "trace_id": "t", "slice_id": ids[r[0]], "track_id": r[1],
        "category": r[2], "name": r[3], "ts": r[4], "dur": r[5] - r[4], "phase": "X",
        "correlation": r[6], "args": r[7],
        "depth": int(nested.depth[i]),
        "parent_id": ids[rows[nested.parent[i]][0]] if nested.parent[i] >= 0 else None,
    } for i, r in enumerate(rows)]
    correlated = {r[6]: ids[r[0]] for r in rows if r[1] != GPU and r[6] is not None}
    flows = [{"category": "ac2g", "slice_out": correlated[r[6]], "slice_in": ids[r[0]]}
             for r in rows if r[1] == GPU and r[6] in correlated]
    table = with_context(
        pa.Table.from_pylist(slices, schema=PARSED_SLICES),
        pa.Table.from_pylist(flows, schema=LAKE_TABLES["flows"]),
        pa.Table.from_pylist([{"track_id": t, "is_gpu": t == GPU} for t in (CPU, GPU, OTHER_CPU)],
                             schema=LAKE_TABLES["threads"]),
    )
    ranges = annotation_ranges(table)
    assert ranges.schema == ANNOTATION_RANGES
    lineage = dict(zip(ranges["slice_id"].to_pylist(), ranges["annotation_lineage"].to_pylist()))
    path = dict(zip(ranges["slice_id"].to_pylist(), ranges["annotation_path"].to_pylist()))
    back = {new: old for old, new in ids.items()}
    return {back[row["slice_id"]]: {**row, "annotation_lineage": lineage.get(row["slice_id"]),
                                    "annotation_path": path.get(row["slice_id"])}
            for row in table.to_pylist()}


KINETO = [
    # id, track, category, name, ts, end, correlation, args
    (1, CPU, "user_annotation", "ProfilerStep#1", 0, 100, None, None),
    (2, CPU, "python_function", "train.py(1): step", 1, 91, None, None),
    (3, CPU, "user_annotation", "x > y", 2, 82, None, None),
    (4, CPU, "cpu_op", "aten::mm", 3, 23, None, None),
    (5, CPU, "user_annotation", "q'<s>", 4, 14, None, None),
    (6, CPU, "cuda_runtime", "cudaLaunchKernel", 5, 7, 10, None),
    (7, CPU, "cuda_runtime", "cudaLaunchKernel", 30, 32, 11, None),
    (8, CPU, "user_annotation", "twin", 40, 50, None, None),
    (9, CPU, "user_annotation", "twin", 40, 50, None, None),
    (10, CPU, "cuda_runtime", "cudaMemcpyAsync", 42, 43, 12, None),
    # Starts inside range 3, ends after it: ranges 1 holds it whole.
    (11, CPU, "cuda_runtime", "cudaLaunchKernel", 55, 85, 13, None),
    (12, CPU, "user_annotation", "later", 200, 250, None, None),
    (13, CPU, "cpu_op", "aten::add", 300, 305, None, None),
    (14, CPU, "cuda_runtime", "cudaLaunchKernel", 301, 302, 14, None),
    (15, OTHER_CPU, "user_annotation", "backward thread", 0, 100, None, None),
    (16, OTHER_CPU, "cuda_runtime", "cudaLaunchKernel", 20, 25, 15, None),
    (20, GPU, "kernel", "k", 500, 510, 10, None),
    (21, GPU, "kernel", "k", 510, 520, 11, None),
    (22, GPU, "gpu_memcpy", "copy", 520, 530, 12, None),
    (23, GPU, "kernel", "k", 530, 540, 13, None),
    (24, GPU, "kernel", "k", 540, 550, 14, None),
    (25, GPU, "kernel", "k", 550, 560, 15, None),
    (26, GPU, "kernel", "orphan", 560, 570, 99, None),
    (27, GPU, "gpu_user_annotation", "x > y", 500, 530, None, None),
]

KINETO_AROUND = {
    # ranges: their parent range
    1: None, 3: 1, 5: 3, 8: 3, 9: 8, 12: None, 15: None,
    # CPU slices: the innermost range holding them
    2: 1, 4: 3, 6: 5, 7: 3, 10: 9, 11: 1, 13: None, 14: None, 16: 15,
    # GPU work: its launch's; none without a launch
    20: 5, 21: 3, 22: 9, 23: 1, 24: None, 25: 15, 26: None, 27: None,
}

KINETO_LINEAGE = {1: [1], 3: [1, 3], 5: [1, 3, 5], 8: [1, 3, 8], 9: [1, 3, 8, 9],
                  12: [12], 15: [15]}

#: The lineage's names joined by ' > ' (a ' > ' inside a name stays: the ids are exact).
KINETO_PATH = {1: "ProfilerStep#1", 3: "ProfilerStep#1 > x > y",
               5: "ProfilerStep#1 > x > y > q'<s>", 8: "ProfilerStep#1 > x > y > twin",
               9: "ProfilerStep#1 > x > y > twin > twin", 12: "later", 15: "backward thread"}


@pytest.mark.parametrize("renumber", [lambda i: i, lambda i: 1000 - 7 * i],
                         ids=["row ids", "scattered ids"])
def test_kineto_ranges_nest_and_surround_launches(renumber) -> None:
    ids = {row[0]: renumber(row[0]) for row in KINETO}
    rows = _trace(KINETO, ids)
    kinds = {i: row["annotation_kind"] for i, row in rows.items() if row["annotation_kind"]}
    assert kinds == dict.fromkeys(KINETO_LINEAGE, "user_annotation")
    around = {i: row["annotation_slice_id"] for i, row in rows.items()}
    assert around == {i: ids[a] if a is not None else None for i, a in KINETO_AROUND.items()}
    lineage = {i: row["annotation_lineage"] for i, row in rows.items()
               if row["annotation_lineage"] is not None}
    assert lineage == {i: [ids[a] for a in chain] for i, chain in KINETO_LINEAGE.items()}
    assert {i: row["annotation_path"] for i, row in rows.items()
            if row["annotation_path"] is not None} == KINETO_PATH


def test_nvtx_push_pop_ranges_only() -> None:
    push_pop = '{"domain id":0,"event type":59,"range id":null}'
    rows = _trace([
        (1, CPU, "nvtx", "outer", 0, 100, None, push_pop),
        (2, CPU, "nvtx", "inner", 10, 60, None, '{"event type": 59}'),
        # A start/end range and a mark are not on the thread's stack: no ranges.
        (3, CPU, "nvtx", "start-end", 12, 50, None, '{"event type":60}'),
        (4, CPU, "nvtx_mark", "mark", 20, 20, None, '{"event type":34}'),
        (5, CPU, "nvtx", "event type 590", 21, 22, None, '{"event type":590}'),
        (6, CPU, "cuda_runtime", "cudaLaunchKernel", 30, 31, 7, None),
        (7, GPU, "kernel", "k", 100, 110, 7, None),
    ], {i: i for i in range(1, 8)})
    assert {i: r["annotation_kind"] for i, r in rows.items() if r["annotation_kind"]} == {
        1: "nvtx", 2: "nvtx"}
    assert rows[2]["annotation_slice_id"] == 1 and rows[2]["annotation_lineage"] == [1, 2]
    assert rows[2]["annotation_path"] == "outer > inner"
    assert rows[6]["annotation_slice_id"] == 2  # inside the start/end range too: not a range
    assert rows[7]["annotation_slice_id"] == 2


def test_a_trace_without_ranges_has_null_columns() -> None:
    rows = _trace([(1, CPU, "cuda_runtime", "cudaLaunchKernel", 0, 1, 3, None),
                   (2, GPU, "kernel", "k", 5, 6, 3, None)], {1: 1, 2: 2})
    assert all(r["annotation_kind"] is None and r["annotation_slice_id"] is None
               and r["annotation_lineage"] is None for r in rows.values())


def test_a_range_without_a_name_is_left_out_of_paths() -> None:
    """As SQL's string_agg over the lineage's names would: no empty segment, NULL alone."""
    rows = _trace([(1, CPU, "user_annotation", None, 0, 100, None, None),
                   (2, CPU, "user_annotation", "inner", 10, 60, None, None)], {1: 1, 2: 2})
    assert rows[1]["annotation_path"] is None and rows[2]["annotation_path"] == "inner"


def test_profiler_steps_are_ranges_whatever_their_category() -> None:
    rows = _trace([
        (1, CPU, "cpu_op", "ProfilerStep#3", 0, 100, None, None),
        (2, CPU, "cpu_op", "ProfilerStep#3x", 10, 20, None, None),
        (3, CPU, "cuda_runtime", "cudaLaunchKernel", 30, 31, 7, None),
        (4, GPU, "kernel", "ProfilerStep#4", 100, 110, 7, None),
    ], {i: i for i in range(1, 5)})
    assert {i: r["annotation_kind"] for i, r in rows.items() if r["annotation_kind"]} == {
        1: "user_annotation"}
    assert rows[3]["annotation_slice_id"] == 1 and rows[4]["annotation_slice_id"] == 1


def _paths_one_by_one(parent_row: np.ndarray, names: list[str | None]) -> list[str | None]:
    """The paths as the definition reads, one range at a time, parents first."""
    paths: dict[int, str | None] = {}

    def path(row: int) -> str | None:
        if row not in paths:
            above = path(int(parent_row[row])) if parent_row[row] >= 0 else None
            name = names[row]
            paths[row] = (name if above is None else above if name is None
                          else above + PATH_SEPARATOR + name)
        return paths[row]
    return [path(row) for row in range(parent_row.size)]


def _random_forest(seed: int, n: int) -> tuple[np.ndarray, list[str | None]]:
    """Parents in any row order, up to 8 deep, over a few names (NULL, empty, hostile)."""
    rng = np.random.default_rng(seed)
    parent_row = np.full(n, -1, dtype=np.int64)
    order = rng.permutation(n)  # a range's parent comes earlier in this order
    depth = np.zeros(n, dtype=np.int64)
    for position in range(1, n):
        row, candidate = order[position], order[rng.integers(0, position)]
        if rng.random() < 0.8 and depth[candidate] < 8:
            parent_row[row], depth[row] = candidate, depth[candidate] + 1
    vocabulary = [None, "", "fwd", "bwd", "a > b", "ProfilerStep#1", "naïve <\"'>"]
    return parent_row, [vocabulary[i] for i in rng.integers(0, len(vocabulary), n)]


@pytest.mark.parametrize("seed", range(5))
def test_both_ways_of_joining_paths_equal_a_walk_one_range_at_a_time(seed: int) -> None:
    parent_row, names = _random_forest(seed, int(np.random.default_rng(seed).integers(1, 400)))
    expected = _paths_one_by_one(parent_row, names)
    assert _paths_by_level(parent_row, pa.array(names, pa.string())).to_pylist() == expected
    assert _paths_walked(parent_row, names).to_pylist() == expected


@pytest.mark.parametrize("n", [PATHS_BY_LEVEL_FROM - 1, PATHS_BY_LEVEL_FROM])
def test_paths_either_side_of_the_switch_to_arrow(n: int) -> None:
    parent_row, names = _random_forest(n, n)
    got = _paths(parent_row, pa.chunked_array([names[:7], names[7:]], pa.string()))
    assert got.to_pylist() == _paths_one_by_one(parent_row, names)


def test_paths_of_no_ranges() -> None:
    for ranges in (_paths(np.empty(0, dtype=np.int64), pa.chunked_array([], pa.string())),
                   _paths_by_level(np.empty(0, dtype=np.int64), pa.array([], pa.string()))):
        assert ranges.to_pylist() == []
