"""An Nsight GPU's ``slices`` file written group by group (ingest/nsys/write.py, args.py).

Why it matters: the slices' ``args`` (JSON text per kernel, call and NVTX
range) are built per write group from each slice's source row instead of
for a whole GPU at once; a wrong pointer or a lost order would put one
kernel's args on another's row, and a group that mixes ``has_role`` rows
with others would cost the models the row-group skip the lake writer
promises. Checked on the real shared exports against what SQLite holds.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.nsys import write
from tracehouse.ingest.nsys.args import ARGS_SQL, SOURCE_CODE, DeferredArgs, args_columns
from tracehouse.ingest.nsys.parse import (
    _CPU_SOURCES,
    _GPU_SOURCES,
    _register,
    args_lookups,
    read_gpu,
    read_shared,
    stand_in_args,
)
from tracehouse.ingest.nsys.read import NsysDatabase
from tracehouse.ingest.nsys.take import take_rows

EXPORT = SHARED_DATA / "nsys" / "mfu_2gpu_before.sqlite"

needs_export = pytest.mark.skipif(not EXPORT.is_file(), reason=f"shared data missing: {EXPORT}")


def test_row_groups_put_flagged_rows_first_and_never_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write, "ROW_GROUP_ROWS", 2)
    flag = pa.chunked_array([[True, False, None, True], [True, False, True]])
    groups = write._row_groups(flag)
    assert [g.tolist() for g in groups] == [[0, 3], [4, 6], [1, 2], [5]]


def test_take_rows_equals_take_in_any_order() -> None:
    table = pa.table({"x": pa.chunked_array([[0, 1, 2], [3, 4, 5], [6]]),
                      "s": pa.chunked_array([["a", "b"], ["c", "d", "e", "f", "g"]])})
    for rows in ([2, 3, 4], [0, 4, 5], [6, 0, 3, 3], [], [5]):
        got = take_rows(table, np.array(rows, dtype=np.int64))
        assert got.to_pylist() == table.take(pa.array(rows, pa.int64())).to_pylist()


def test_stand_in_args_keep_only_the_nvtx_event_type() -> None:
    args = stand_in_args(pa.chunked_array([[59, None, 34]], pa.int64()))
    assert args.to_pylist() == ['{"event type": 59}', None, '{"event type": 34}']


def test_args_keep_only_columns_their_sources_read() -> None:
    """DeferredArgs keeps the columns each args expression names, all of them read from
    the export, and never the times or names the mapping alone needs."""
    read = dict(_GPU_SOURCES + _CPU_SOURCES)
    assert set(ARGS_SQL) == set(read)
    for key, columns in ((key, args_columns(key)) for key in ARGS_SQL):
        assert columns and set(columns) <= set(read[key].columns), key
        assert "start" not in columns and "demangledName" not in columns, key
    assert args_columns("kernel")[-1] == "shortName"  # the id its name is looked up by
    assert "end" in args_columns("nvtx")  # 'is unterminated'


@needs_export
def test_args_follow_each_row_to_its_source_in_any_order() -> None:
    """Kernels and runtime calls mixed and shuffled: each row's args are its own row's."""
    with NsysDatabase(EXPORT) as db:
        shared = read_shared(db)
        tables = {**shared, **read_gpu(db, 0, [], None)}
    with duckdb.connect() as mapping:
        sources = _register(mapping, tables)
    kernels, calls = sources["kernel"].num_rows, sources["runtime"].num_rows
    src = np.concatenate([np.full(kernels, SOURCE_CODE["kernel"]),
                          np.full(calls, SOURCE_CODE["runtime"])]).astype(np.int8)
    src_row = np.concatenate([np.arange(kernels), np.arange(calls)]).astype(np.int64)
    deferred = DeferredArgs(sources, args_lookups(tables), src, src_row)
    try:
        shuffled = np.random.default_rng(7).permutation(src.size)
        args = [json.loads(text) for text in deferred.for_rows(shuffled).to_pylist()]
    finally:
        deferred.close()
    grids = sources["kernel"].select(["gridX", "gridY", "gridZ"]).to_pylist()
    returns = sources["runtime"].column("returnValue").to_pylist()
    for row, got in zip(shuffled.tolist(), args):
        if row < kernels:
            assert got["grid"] == list(grids[row].values())
        else:
            assert got == {"return value": returns[row - kernels], "api name": got["api name"]}
            assert got["api name"] is not None


@needs_export
@pytest.mark.slow
def test_lake_slices_groups_and_kernel_args(tmp_path: Path) -> None:
    """The ingested file: no row group mixes has_role, and every kernel's args name its
    own grid (matched by start time and stream to SQLite's kernel rows)."""
    from tracehouse.ingest.runner import ingest_paths

    result = ingest_paths([EXPORT], warehouse=tmp_path, run="w", jobs=1, progress=False)
    assert not result.failed
    files = sorted((tmp_path / "lake" / "slices").glob("run=w/*.parquet"))
    assert len(files) == 2
    with sqlite3.connect(f"{EXPORT.resolve().as_uri()}?mode=ro", uri=True) as lite:
        want = {(start, stream): [x, y, z] for start, stream, x, y, z in lite.execute(
            "select start, streamId, gridX, gridY, gridZ from CUPTI_ACTIVITY_KIND_KERNEL")}
    kernels = 0
    for file in files:
        handle = pq.ParquetFile(file)
        for group in range(handle.num_row_groups):
            roles = set(handle.read_row_group(group, columns=["has_role"])["has_role"]
                        .to_pylist())
            assert len(roles) == 1, f"{file.name} row group {group} mixes has_role"
        table = handle.read(columns=["category", "ts", "stream", "args"])
        (base,) = _base_ns(tmp_path)
        for category, ts, stream, args in zip(*(table[c].to_pylist() for c in table.column_names)):
            if category == "kernel":
                kernels += 1
                assert json.loads(args)["grid"] == want[(ts - base, stream)]
    assert kernels == len(want)


def _base_ns(root: Path) -> set[int]:
    return {value for file in (root / "lake" / "traces").glob("run=w/*.parquet")
            for value in pq.read_table(file, columns=["base_time_ns"])["base_time_ns"].to_pylist()}
