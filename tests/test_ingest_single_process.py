"""Traces of jobs that were not distributed (issue 14).

A single-GPU trace (a ResNet run, a ROCm MI250 capture) has no
``distributedInfo`` and no rank in its file name. HTA loads it; so must
we: it is rank 0 of a one-rank run, and the ingest line says so. Two such
traces in one run cannot be told apart, so each is reported, naming the
other. The traces are made from a real one by removing what a
non-distributed job does not write.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.runner import ingest_paths

A100 = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not A100.is_file(), reason=f"shared trace {A100} not found"),
]


def _single_process_trace(path: Path, drop_events: int = 0) -> Path:
    """The A100 trace without distributedInfo (and its comm args' group ranks)."""
    doc = json.loads(gzip.decompress(A100.read_bytes()))
    del doc["distributedInfo"]
    doc["traceEvents"] = doc["traceEvents"][drop_events:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return path


def test_single_process_trace_is_rank_0(tmp_path: Path) -> None:
    trace = _single_process_trace(tmp_path / "resnet50" / "resnet50_a100.pt.trace.json.gz")
    stream = io.StringIO()
    result = ingest_paths([trace.parent], tmp_path / "wh", jobs=1, stream=stream)
    assert result.failed == [], [f.line() for f in result.failed]
    assert [(loaded.run_id, loaded.rank) for loaded in result.loaded] == [("resnet50", 0)]
    assert "rank 0 (single-process trace" in stream.getvalue()
    glob = str(tmp_path / "wh" / "lake" / "traces" / "**" / "*.parquet")
    with duckdb.connect() as con:
        rows = con.execute("select rank, world_size, slice_count from read_parquet(?, "
                           "union_by_name = true, hive_partitioning = false)",
                           [glob]).fetchall()
    assert len(rows) == 1 and rows[0][:2] == (0, None) and rows[0][2] > 1000


def test_two_single_process_traces_in_one_run_are_an_error_naming_both(
        tmp_path: Path) -> None:
    folder = tmp_path / "mi250"
    first = _single_process_trace(folder / "mi250_a.json.gz")
    second = _single_process_trace(folder / "mi250_b.json.gz", drop_events=1)
    for jobs in (1, 2):
        result = ingest_paths([folder], tmp_path / f"wh{jobs}", jobs=jobs, progress=False,
                              stream=io.StringIO())
        assert result.loaded == []
        failed = {Path(f.path): f for f in result.failed}
        assert set(failed) == {first, second}
        assert str(second) in failed[first].message and str(first) in failed[second].message
        assert all(f.kind == "no_rank" and "--run" in f.hint for f in failed.values())
    # Each in its own run: both land as rank 0.
    for trace in (first, second):
        result = ingest_paths([trace], tmp_path / "wh_split", run=trace.stem.split(".")[0],
                              progress=False, stream=io.StringIO())
        assert result.failed == [] and [lo.rank for lo in result.loaded] == [0]


def test_a_world_above_one_still_needs_a_rank(tmp_path: Path) -> None:
    """distributedInfo with world_size 2 but no rank: not a single-process job."""
    doc = json.loads(gzip.decompress(A100.read_bytes()))
    del doc["distributedInfo"]["rank"]
    trace = tmp_path / "job" / "trace.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps(doc))
    result = ingest_paths([trace], tmp_path / "wh", progress=False, stream=io.StringIO())
    assert [f.kind for f in result.failed] == ["no_rank"]
    assert "world size 2" in result.failed[0].message
