"""An Nsight GPU's ``slices`` file written group by group (ingest/nsys/write.py, args.py).

Why it matters: the slices' ``args`` (JSON text per kernel, call and NVTX
range) are built per read batch from the rows of each activity table in it;
a lost order would put one kernel's args on another's row, and a group that
mixes ``has_role`` rows with others would cost the models the row-group skip
the lake writer promises. Checked on the real shared exports against what
SQLite holds.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.nsys.args import ARGS_SQL, ArgsText, args_columns
from tracehouse.ingest.nsys.names import StringLookup
from tracehouse.ingest.nsys.parse import (
    CPU_SOURCES,
    GPU_SOURCES,
    args_lookups,
    read_shared,
    stand_in_args,
)
from tracehouse.ingest.nsys.read import NsysDatabase

EXPORT = SHARED_DATA / "nsys" / "mfu_2gpu_before.sqlite"

needs_export = pytest.mark.skipif(not EXPORT.is_file(), reason=f"shared data missing: {EXPORT}")


def test_stand_in_args_keep_only_the_nvtx_event_type() -> None:
    args = stand_in_args(pa.chunked_array([[59, None, 34]], pa.int64()))
    assert args.to_pylist() == ['{"event type": 59}', None, '{"event type": 34}']


def test_args_keep_only_columns_their_sources_read() -> None:
    """The args read the columns each args expression names, all of them read from the
    export, and never the times or names the mapping alone needs."""
    read = dict(GPU_SOURCES + CPU_SOURCES)
    assert set(ARGS_SQL) == set(read)
    for key, columns in ((key, args_columns(key)) for key in ARGS_SQL):
        assert columns and set(columns) <= set(read[key].columns), key
        assert "start" not in columns and "demangledName" not in columns, key
    assert args_columns("kernel")[-1] == "shortName"  # the id its name is looked up by
    assert "end" in args_columns("nvtx")  # 'is unterminated'


@needs_export
def test_args_of_each_row_are_its_own() -> None:
    """A batch of kernels and of runtime calls: each row's args hold its own grid, return
    value and looked-up name (ArgsText, as each write batch gets them)."""
    with NsysDatabase(EXPORT) as db:
        shared = read_shared(db)
        kernels = db.query('select * from "CUPTI_ACTIVITY_KIND_KERNEL" limit 500')
        calls = db.query('select * from "CUPTI_ACTIVITY_KIND_RUNTIME" limit 500')
    strings = StringLookup(shared["strings"])
    text = ArgsText({"strings": strings,
                     "domains": StringLookup(args_lookups(shared)["domains"])})
    names = dict(zip(*(shared["strings"][c].to_pylist() for c in ("id", "value"))))
    try:
        kernel_args = [json.loads(t) for t in text("kernel", kernels).to_pylist()]
        call_args = [json.loads(t) for t in text("runtime", calls).to_pylist()]
    finally:
        text.close()
    for row, got in zip(kernels.to_pylist(), kernel_args):
        assert got["grid"] == [row["gridX"], row["gridY"], row["gridZ"]]
        assert got["short name"] == names[row["shortName"]]
    for row, got in zip(calls.to_pylist(), call_args):
        assert got == {"return value": row["returnValue"], "api name": names[row["nameId"]]}


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
