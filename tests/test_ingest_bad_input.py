"""A folder mixing good traces with every kind of bad input (issue 2, acceptance 3).

The good traces must land in full; each bad file must be reported on one
line (path, reason, hint), recorded in ``ingest_errors``, and leave no row
in any other lake table; the exit code is 1. Fixing a file and re-running
loads it and clears its error; re-running unchanged loads nothing new.

The real traces are read from ``../shared/data`` and every mutated copy is
built in ``tmp_path``; nothing is copied into the repository.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.runner import IngestResult, ingest_paths, trace_id_for
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES

KINETO = SHARED_DATA / "kineto"
DLRM = KINETO / "dlrm_8rank"
MEGATRON_ITER = KINETO / "megatron_cpu" / "tp2_pp2_dp1_vpp2" / "iteration_3"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not DLRM.is_dir() or not MEGATRON_ITER.is_dir(),
    reason=f"shared Kineto traces not found under {KINETO}",
)]

SLICE_PHASES = {"X", "i", "I"}


# --------------------------------------------------------------------------- helpers


@cache
def _dlrm_files() -> list[Path]:
    return sorted(DLRM.glob("*.pt.trace.json.gz"))


@cache
def _base_json() -> str:
    """The text of one real dlrm trace (rank 0, ~3k events)."""
    return gzip.decompress(_dlrm_files()[0].read_bytes()).decode()


def _doc(rank: int) -> dict:
    """A fresh copy of the base trace claiming ``rank`` (so no two bad files clash)."""
    doc = json.loads(_base_json())
    doc["distributedInfo"]["rank"] = rank
    return doc


def _encode(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def _with_marker(rank: int, place, marker: bytes) -> bytes:
    """The trace with a unique placeholder put by ``place``, replaced by raw ``marker`` bytes."""
    doc = _doc(rank)
    place(doc)
    text = _encode(doc)
    assert text.count(b'"@@MARK@@"') == 1
    return text.replace(b'"@@MARK@@"', marker)


def _nth_complete(doc: dict, n: int = 5) -> dict:
    return [ev for ev in doc["traceEvents"] if ev.get("ph") == "X" and "args" in ev][n]


def _set_name(doc: dict) -> None:
    _nth_complete(doc)["name"] = "@@MARK@@"


def _set_args_string(doc: dict) -> None:
    _nth_complete(doc)["args"]["Input type"] = "@@MARK@@"


def _set_ts(doc: dict) -> None:
    _nth_complete(doc, 3)["ts"] = "@@MARK@@"


def _set_correlation(doc: dict) -> None:
    _nth_complete(doc, 3)["args"]["correlation"] = "@@MARK@@"


def _set_external_id(doc: dict) -> None:
    _nth_complete(doc, 3)["args"]["External id"] = "@@MARK@@"


BEYOND_INT64 = b"99999999999999999999"


@cache
def _bad_files() -> dict[str, tuple[str, bytes]]:
    """File name → (expected error kind, bytes). Each file claims its own rank."""
    good = _encode(_doc(100))
    return {
        "empty.json": ("empty", b""),
        "truncated.json": ("truncated", good[: len(good) // 2]),
        "truncated.json.gz": ("truncated", gzip.compress(good)[:20_000]),
        "invalid.json": ("invalid_json", good.replace(b'"dur": ', b'"dur": :', 1)),
        "not_kineto_object.json": ("not_kineto", b'{"foo": 1}'),
        "not_kineto_array.json": ("not_kineto", b"[1, 2, 3]"),
        "utf8_in_name.json": ("invalid_utf8", _with_marker(101, _set_name, b'"bad \xff\xfe name"')),
        "utf8_in_args.json": (
            "invalid_utf8",
            _with_marker(102, _set_args_string, b'"bad \xc3\x28 arg"'),
        ),
        # Issue 15: random bytes named .json.gz are not gzip (was "invalid JSON").
        "random.json.gz": ("invalid_gzip", hashlib.sha512(b"not gzip").digest() * 64),
        "int64_ts.json": ("number_out_of_range", _with_marker(103, _set_ts, BEYOND_INT64)),
        "int64_correlation.json": (
            "number_out_of_range",
            _with_marker(104, _set_correlation, BEYOND_INT64),
        ),
        "int64_external_id.json": (
            "number_out_of_range",
            _with_marker(105, _set_external_id, BEYOND_INT64),
        ),
    }


@cache
def _stray_copy() -> bytes:
    """Megatron rank 1 of iteration 3, edited to claim rank 0: a rank seen twice."""
    doc = json.loads(
        gzip.decompress((MEGATRON_ITER / "rank_0001_iter_3.pt.trace.json.gz").read_bytes())
    )
    assert doc["distributedInfo"]["rank"] == 1
    doc["distributedInfo"]["rank"] = 0
    return gzip.compress(_encode(doc), compresslevel=1)


@dataclass
class Mixed:
    """A folder of good and bad traces and what ingest must make of each."""

    root: Path
    good: dict[Path, int]  # path → number of slice events in the file
    bad: dict[Path, str]  # path → expected error kind


def _slice_events(path: Path) -> int:
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return sum(ev.get("ph") in SLICE_PHASES for ev in json.loads(text)["traceEvents"])


def _build_mixed(root: Path) -> Mixed:
    """``dlrm/`` (3 good), ``bad/`` (one file per bad kind), ``job/iteration_3/``
    (rank 0, and a second file that also claims rank 0)."""
    mixed = Mixed(root, {}, {})
    (root / "dlrm").mkdir(parents=True)
    for src in _dlrm_files()[:3]:
        dst = root / "dlrm" / src.name
        shutil.copyfile(src, dst)
        mixed.good[dst.resolve()] = _slice_events(dst)
    (root / "bad").mkdir()
    for name, (kind, data) in _bad_files().items():
        dst = root / "bad" / name
        dst.write_bytes(data)
        mixed.bad[dst.resolve()] = kind
    iteration = root / "job" / "iteration_3"
    iteration.mkdir(parents=True)
    first = iteration / "rank_0000_iter_3.pt.trace.json.gz"
    shutil.copyfile(MEGATRON_ITER / first.name, first)
    mixed.good[first.resolve()] = _slice_events(first)
    stray = iteration / "rank_0001_iter_3.pt.trace.json.gz"
    stray.write_bytes(_stray_copy())
    mixed.bad[stray.resolve()] = "duplicate_rank"
    return mixed


@pytest.fixture
def mixed(tmp_path: Path) -> Mixed:
    return _build_mixed(tmp_path / "traces")


def lake_connection(warehouse: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per lake table, read straight from Parquet."""
    con = duckdb.connect()
    for table in LAKE_TABLES:
        glob = str(warehouse / "lake" / table / "**" / "*.parquet").replace("'", "''")
        con.execute(
            f"create view {table} as select * from read_parquet('{glob}', "
            "union_by_name = true, hive_partitioning = false)"
        )
    return con


def _trace_id_of(path: Path, run_id: str) -> str:
    return trace_id_for(run_id, hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest())


def _run_of(path: Path) -> str:
    folder = path.parent.parent if path.parent.name.startswith("iteration_") else path.parent
    return folder.name


def assert_lake(warehouse: Path, mixed: Mixed) -> None:
    """Good traces fully present, bad ones nowhere but ingest_errors, no temporaries."""
    assert not list((warehouse / "lake").rglob("*.tmp")), "temporaries left in the lake"
    with lake_connection(warehouse) as con:
        traces = con.execute("select path, trace_id, slice_count from traces").fetchall()
        by_path = {path: (trace_id, n) for path, trace_id, n in traces}
        assert len(traces) == len(by_path) == len(mixed.good)
        assert set(by_path) == {str(p) for p in mixed.good}
        slices = dict(con.execute("select trace_id, count(*) from slices group by all").fetchall())
        for path, expected in mixed.good.items():
            trace_id, slice_count = by_path[str(path)]
            assert slice_count == expected
            assert slices.get(trace_id) == expected, (
                f"{path}: {slices.get(trace_id)} slices in the lake, {expected} in the file"
            )

        # No row of any per-trace table outside the committed traces, and none
        # under the trace id a failed file would have had.
        committed = {trace_id for trace_id, _ in by_path.values()}
        failed_ids = [_trace_id_of(path, _run_of(path)) for path in mixed.bad]
        for table in TRACE_TABLES:
            ids = {
                row[0] for row in con.execute(f"select distinct trace_id from {table}").fetchall()
            }
            assert ids <= committed, f"{table} holds rows of uncommitted traces"
            assert not ids & set(failed_ids), f"{table} holds rows of a failed file"

        errors = con.execute("select path, error_kind, message, hint from ingest_errors")
        errors = errors.fetchall()
    assert sorted(e[0] for e in errors) == sorted(str(p) for p in mixed.bad)
    for path, kind, message, hint in errors:
        assert kind == mixed.bad[Path(path)], (path, kind, message)
        assert message and hint


def assert_failures(result: IngestResult, mixed: Mixed) -> None:
    assert result.exit_code == 1
    assert {Path(f.path): f.kind for f in result.failed} == mixed.bad
    for failed in result.failed:
        line = failed.line()
        assert line.startswith(f"error: {failed.path}: ")
        assert "(hint: " in line and "\n" not in line


# --------------------------------------------------------------------------- tests


def test_api_loads_good_reports_bad(mixed: Mixed, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    stream = io.StringIO()
    result = ingest_paths([mixed.root], warehouse, jobs=1, progress=False, stream=stream)

    assert_failures(result, mixed)
    assert {Path(loaded.path) for loaded in result.loaded} == set(mixed.good)
    for loaded in result.loaded:
        assert loaded.slices == mixed.good[Path(loaded.path)]
    error_lines = [ln for ln in stream.getvalue().splitlines() if ln.startswith("error: ")]
    assert sorted(error_lines) == sorted(f.line() for f in result.failed)
    assert_lake(warehouse, mixed)


def test_cli_parallel_loads_good_reports_bad(mixed: Mixed, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracehouse.cli",
            "ingest",
            str(mixed.root),
            "--warehouse",
            str(warehouse),
            "-j",
            "3",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    error_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(error_lines) == len(mixed.bad), proc.stderr
    assert f"failed {len(mixed.bad)}" in proc.stderr
    # With -j 3 either file of the rank-0 pair may commit first; the other fails.
    original, stray = sorted(p for p in [*mixed.good, *mixed.bad] if p.parent.name == "iteration_3")
    (loser,) = [ln for ln in error_lines if "rank 0 appears twice" in ln]
    if loser.startswith(f"error: {original}: "):
        mixed.good[stray] = _slice_events(stray)
        del mixed.good[original], mixed.bad[stray]
        mixed.bad[original] = "duplicate_rank"
    for path in mixed.bad:
        mine = [ln for ln in error_lines if ln.startswith(f"error: {path}: ")]
        assert len(mine) == 1, (path, proc.stderr)
        assert "(hint: " in mine[0]
    assert_lake(warehouse, mixed)


def test_rerun_skips_loaded_and_fix_clears_error(mixed: Mixed, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    first = ingest_paths([mixed.root], warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert_failures(first, mixed)

    # Unchanged: nothing new lands, every good file is skipped, the bad still fail.
    again = ingest_paths([mixed.root], warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert again.loaded == []
    assert {Path(p) for p, _ in again.skipped} == set(mixed.good)
    assert_failures(again, mixed)
    assert_lake(warehouse, mixed)

    # Fix one bad file: it loads and its ingest_errors row goes away.
    fixed = mixed.root / "bad" / "truncated.json"
    fixed.write_bytes(_encode(_doc(100)))
    kind = mixed.bad.pop(fixed.resolve())
    assert kind == "truncated"
    mixed.good[fixed.resolve()] = _slice_events(fixed)
    third = ingest_paths([mixed.root], warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert [Path(loaded.path) for loaded in third.loaded] == [fixed.resolve()]
    assert_failures(third, mixed)
    assert_lake(warehouse, mixed)

    # Remove the remaining bad files: the re-run is clean and loads nothing.
    for path in mixed.bad:
        path.unlink()
    last = ingest_paths([mixed.root], warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert last.exit_code == 0 and last.failed == [] and last.loaded == []
    assert {Path(p) for p, _ in last.skipped} == set(mixed.good)


def test_explicit_bad_file_alone_exits_1(tmp_path: Path) -> None:
    """A single bad file named on the command line: exit 1, one line, one error row."""
    bad = tmp_path / "rank-3.json"
    bad.write_bytes(b'{"traceEvents": [')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracehouse.cli",
            "ingest",
            str(bad),
            "--warehouse",
            str(tmp_path / "wh"),
            "--run",
            "solo",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert lines == [lines[0]] and lines[0].startswith(f"error: {bad.resolve()}: ")
    assert "truncated" in lines[0]
    with lake_connection(tmp_path / "wh") as con:
        rows = con.execute("select run_id, error_kind from ingest_errors").fetchall()
        assert rows == [("solo", "truncated")]
        for table in TRACE_TABLES:
            assert con.execute(f"select count(*) from {table}").fetchone() == (0,)


def test_rank_twice_across_profiler_steps_with_a_huge_step(tmp_path: Path) -> None:
    """Two files of one run claim rank 0 without iteration folders: the clash is found
    from ProfilerStep ranges, quickly even when one step number is huge (the range
    is compared, never expanded)."""
    folder = tmp_path / "job"
    folder.mkdir()
    first = _doc(0)
    step = next(ev for ev in first["traceEvents"] if ev.get("name") == "ProfilerStep#10")
    first["traceEvents"].append(
        {**step, "name": "ProfilerStep#1000000000000000", "ts": step["ts"] + step["dur"] + 1}
    )
    (folder / "a_rank-0.json").write_bytes(_encode(first))
    second = _doc(0)
    second["traceEvents"].pop(0)  # other content, same rank, step 10 again
    (folder / "b_rank-0.json").write_bytes(_encode(second))

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracehouse.cli",
            "ingest",
            str(folder),
            "--warehouse",
            str(tmp_path / "wh"),
            "-j",
            "1",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert line.startswith(f"error: {(folder / 'b_rank-0.json').resolve()}: rank 0 appears twice")


def test_random_bytes_named_gz_are_reported_as_not_gzip(tmp_path: Path) -> None:
    """Issue 15: the message says what is wrong (no gzip header), not "invalid JSON"."""
    folder = tmp_path / "job"
    folder.mkdir()
    bad = folder / "rank-0.json.gz"
    bad.write_bytes(hashlib.sha512(b"random").digest() * 100)
    result = ingest_paths([folder], tmp_path / "wh", progress=False, stream=io.StringIO())
    (failed,) = result.failed
    assert failed.kind == "invalid_gzip" and "not gzip" in failed.message
    assert "JSON" not in failed.message


def test_multi_member_gzip_loads_whole(tmp_path: Path) -> None:
    """A gzip file of several members (some writers flush in pieces) is read to the
    end, not cut after the first member."""
    from tracehouse.ingest.kineto.read import read_trace_bytes

    text = _encode(_doc(0))
    half = len(text) // 2
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    assert read_trace_bytes(path)[1] == text
    # Members of equal size (a writer flushing fixed-size pieces): the trailer's
    # size matches the first member alone, its CRC does not.
    even = text[: len(text) // 2 * 2]
    path.write_bytes(gzip.compress(even[: len(even) // 2]) + gzip.compress(even[len(even) // 2:]))
    assert read_trace_bytes(path)[1] == even


def test_gzip_trailer_claiming_a_huge_size_is_not_trusted(tmp_path: Path) -> None:
    """The trailer sizes the output buffer only when deflate could reach that size:
    a damaged trailer claiming ~4 GiB costs no 4 GiB allocation, and the file is
    reported as damaged."""
    from tracehouse.ingest.kineto.read import read_trace_bytes
    from tracehouse.ingest.trace_types import TraceError

    data = gzip.compress(_encode(_doc(0)))
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(data[:-4] + (2**32 - 1).to_bytes(4, "little"))
    with pytest.raises(TraceError) as info:
        read_trace_bytes(path)
    assert info.value.kind == "invalid_gzip"
