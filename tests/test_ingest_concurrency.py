"""Atomicity and concurrency of ingest (issue 2: "writes are atomic ... a crash or
Ctrl-C never leaves half a trace in the lake; two concurrent ingests into one
warehouse cannot corrupt it").

* two ``tracehouse ingest`` processes on the same folder and warehouse: both
  exit 0 and every trace is in the lake exactly once;
* a process killed in the middle of a commit (some tables renamed into place,
  no ``traces`` marker, temporaries left): the next ingest removes the debris
  and loads the trace;
* a KeyboardInterrupt (in-process and a real SIGINT to a parallel ingest)
  leaves no temporaries and only fully committed traces.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse import cli
from tracehouse.ingest import runner
from tracehouse.ingest.runner import ingest_paths
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES

KINETO = SHARED_DATA / "kineto"
DLRM = KINETO / "dlrm_8rank"
MEGATRON = KINETO / "megatron_cpu"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not DLRM.is_dir() or not MEGATRON.is_dir(),
    reason=f"shared Kineto traces not found under {KINETO}",
)]

SLICE_PHASES = {"X", "i", "I"}


@cache
def _slice_events(path: Path) -> int:
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return sum(ev.get("ph") in SLICE_PHASES for ev in json.loads(text)["traceEvents"])


def _traces_under(*folders: Path) -> list[Path]:
    return sorted(p.resolve() for folder in folders for p in folder.rglob("*.pt.trace.json.gz"))


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "tracehouse.cli", "ingest", *map(str, args)]


def _connect(warehouse: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table in LAKE_TABLES:
        glob = str(warehouse / "lake" / table / "**" / "*.parquet").replace("'", "''")
        con.execute(
            f"create view {table} as select * from read_parquet('{glob}', "
            "union_by_name = true, hive_partitioning = false)"
        )
    return con


def assert_consistent(warehouse: Path, expected: Iterable[Path]) -> None:
    """Exactly the ``expected`` files are loaded, each once and in full; nothing else
    is on disk: no temporaries, no per-trace file without its ``traces`` marker."""
    expected = {str(p) for p in expected}
    lake = warehouse / "lake"
    assert not list(lake.rglob("*.tmp")), "temporaries left in the lake"
    markers = {(p.parent.name, p.stem) for p in (lake / "traces").glob("run=*/*.parquet")}
    for table in TRACE_TABLES:
        files = {(p.parent.name, p.stem) for p in (lake / table).glob("run=*/*.parquet")}
        assert files == markers, f"{table}: files without a commit marker: {files - markers}"
    with _connect(warehouse) as con:
        rows = con.execute("select path, trace_id, slice_count from traces").fetchall()
        assert sorted(r[0] for r in rows) == sorted(expected), "a trace missing or loaded twice"
        assert len({r[1] for r in rows}) == len(rows), "duplicate trace ids"
        slices = dict(con.execute("select trace_id, count(*) from slices group by all").fetchall())
        for path, trace_id, slice_count in rows:
            assert slice_count == slices.get(trace_id, 0) == _slice_events(Path(path)), path
        trace_ids = {r[1] for r in rows}
        for table in TRACE_TABLES:
            ids = {r[0] for r in con.execute(f"select distinct trace_id from {table}").fetchall()}
            assert ids <= trace_ids, f"{table} holds rows of uncommitted traces"


# --------------------------------------------------------------------------- concurrency


def test_two_concurrent_ingests_load_each_trace_once(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    sources = [DLRM, MEGATRON / "tp2_pp2_dp1_vpp2"]
    procs = [
        subprocess.Popen(
            _cli(*sources, "--warehouse", warehouse, "-j", "2", "-q"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    expected = _traces_under(*sources)
    # The lock serialises the two: one loads everything, the other finds it loaded.
    loaded = sorted(int(err.split("loaded ")[1].split(" ")[0]) for _, err in outputs)
    assert loaded == [0, len(expected)], [err for _, err in outputs]
    assert_consistent(warehouse, expected)


def test_concurrent_ingests_of_overlapping_folders(tmp_path: Path) -> None:
    """Different but overlapping inputs at once: the union lands, each file once."""
    warehouse = tmp_path / "wh"
    one, two = MEGATRON / "tp2_pp2_dp1_vpp2", MEGATRON / "tp1_pp4_dp2"
    procs = [
        subprocess.Popen(
            _cli(DLRM, one, "--warehouse", warehouse, "-j", "2", "-q"),
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            _cli(one, two, "--warehouse", warehouse, "-j", "2", "-q"),
            stderr=subprocess.PIPE,
            text=True,
        ),
    ]
    errs = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errs
    assert_consistent(warehouse, _traces_under(DLRM, one, two))


# --------------------------------------------------------------------------- crash recovery


def _lake_files(warehouse: Path) -> set[Path]:
    return {p for p in (warehouse / "lake").rglob("*") if p.is_file()}


def test_recovery_removes_temporaries_and_orphans(tmp_path: Path) -> None:
    """Debris as a crash leaves it: temporaries, and data files without a marker."""
    warehouse = tmp_path / "wh"
    files = sorted(DLRM.glob("*.pt.trace.json.gz"))[:2]
    assert ingest_paths(files, warehouse, progress=False).exit_code == 0
    clean = _lake_files(warehouse)

    lake = warehouse / "lake"
    committed = sorted(p.stem for p in (lake / "traces" / "run=dlrm_8rank").glob("*.parquet"))[0]
    debris = []
    for table in TRACE_TABLES:
        folder = lake / table / "run=dlrm_8rank"
        tmp = folder / f".{committed}.parquet.deadbeef0001.tmp"
        shutil.copyfile(folder / f"{committed}.parquet", tmp)
        debris.append(tmp)
        if table not in ("traces", "process_groups"):
            # A trace whose commit stopped before its marker: the data files
            # of a trace id that has no ``traces`` row (here, copies of a
            # committed trace's rows under a new name).
            orphan = folder / "00000000deadbeef.parquet"
            shutil.copyfile(folder / f"{committed}.parquet", orphan)
            debris.append(orphan)
    other_run = lake / "slices" / "run=crashed_run"
    other_run.mkdir()
    shutil.copyfile(
        lake / "slices" / "run=dlrm_8rank" / f"{committed}.parquet",
        other_run / "0123456789abcdef.parquet",
    )
    debris.append(other_run / "0123456789abcdef.parquet")
    with _connect(warehouse) as con:  # the debris is visible to a naive reader
        assert con.execute("select count(*) from slices").fetchone()[0] > sum(
            _slice_events(p) for p in files
        )

    result = ingest_paths(files, warehouse, progress=False)
    assert result.exit_code == 0 and result.loaded == []
    assert len(result.skipped) == len(files)
    assert not any(p.exists() for p in debris)
    assert _lake_files(warehouse) == clean
    assert_consistent(warehouse, [p.resolve() for p in files])


def test_process_killed_mid_commit_recovers(tmp_path: Path) -> None:
    """A real crash: the process dies (os._exit) after renaming some tables of its
    second trace into place, before the ``traces`` marker; nothing cleans up."""
    warehouse = tmp_path / "wh"
    files = sorted(DLRM.glob("*.pt.trace.json.gz"))[:3]
    script = textwrap.dedent(f"""
        import os, sys
        from tracehouse.ingest import lake, runner
        calls = []
        real_commit = lake.commit
        def dying_commit(pending):
            pending = list(pending)
            calls.append(1)
            if len(calls) == 2:
                for tmp, final in pending[:3]:  # slices, flows, threads land; no marker
                    os.replace(tmp, final)
                os._exit(137)
            real_commit(pending)
        lake.commit = dying_commit
        runner.ingest_paths({[str(p) for p in files]!r}, {str(warehouse)!r}, jobs=1,
                            progress=False)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 137, proc.stderr
    lake = warehouse / "lake"
    assert list(lake.rglob("*.tmp")), "the crash should have left temporaries"
    markers = {p.stem for p in (lake / "traces").rglob("run=*/*.parquet")}
    data = {p.stem for p in (lake / "slices").rglob("run=*/*.parquet")}
    assert len(markers) == 1 and len(data - markers) == 1, "expected one half-committed trace"

    result = ingest_paths(files, warehouse, progress=False, stream=io.StringIO())
    assert result.exit_code == 0
    assert len(result.loaded) == 2 and len(result.skipped) == 1
    assert_consistent(warehouse, [p.resolve() for p in files])


# --------------------------------------------------------------------------- Ctrl-C


def _interrupt_on_second_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = runner.parse_kineto

    def parse(data: bytes, source, *args, **kwargs):
        calls.append(str(source.path))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(data, source, *args, **kwargs)

    monkeypatch.setattr(runner, "parse_kineto", parse)
    return calls


def test_keyboard_interrupt_leaves_only_committed_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse = tmp_path / "wh"
    files = [p.resolve() for p in sorted(DLRM.glob("*.pt.trace.json.gz"))[:4]]
    calls = _interrupt_on_second_parse(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(files, warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert len(calls) == 2
    assert_consistent(warehouse, [Path(calls[0])])

    monkeypatch.undo()
    result = ingest_paths(files, warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert result.exit_code == 0 and len(result.loaded) == 3 and len(result.skipped) == 1
    assert_consistent(warehouse, files)


def test_keyboard_interrupt_mid_commit_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between two renames of one trace's commit: the next run completes it."""
    warehouse = tmp_path / "wh"
    files = [p.resolve() for p in sorted(DLRM.glob("*.pt.trace.json.gz"))[:2]]
    from tracehouse.ingest import lake

    real_commit = lake.commit

    def interrupted_commit(pending):
        pending = list(pending)
        os.replace(*pending[0])
        raise KeyboardInterrupt

    monkeypatch.setattr(lake, "commit", interrupted_commit)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(files, warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert not list((warehouse / "lake").rglob("*.tmp"))
    with _connect(warehouse) as con:
        assert con.execute("select count(*) from traces").fetchone() == (0,)

    monkeypatch.setattr(lake, "commit", real_commit)
    result = ingest_paths(files, warehouse, jobs=1, progress=False, stream=io.StringIO())
    assert result.exit_code == 0 and len(result.loaded) == 2
    assert_consistent(warehouse, files)


def test_cli_reports_interrupt_with_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "wh"
    _interrupt_on_second_parse(monkeypatch)
    code = cli.main(["ingest", str(DLRM), "--warehouse", str(warehouse), "-j", "1", "-q"])
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    loaded = [Path(p) for (p,) in _connect(warehouse).execute("select path from traces").fetchall()]
    assert len(loaded) == 1
    assert_consistent(warehouse, loaded)


def test_sigint_to_parallel_ingest(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT to the process group) during ``-j 2``: whatever moment it
    lands, the lake holds only complete traces, and a re-run completes the load."""
    warehouse = tmp_path / "wh"
    sources = [MEGATRON / "tp1_pp4_dp2", DLRM]
    proc = subprocess.Popen(
        _cli(*sources, "--warehouse", warehouse, "-j", "2", "-q"),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lake = warehouse / "lake" / "traces"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(lake.glob("run=*/*.parquet"))) >= 2:  # mid-run: some traces landed
            break
        time.sleep(0.02)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err  # 0 only if it finished before the signal
    assert "Traceback" not in err, err
    loaded = [Path(p) for (p,) in _connect(warehouse).execute("select path from traces").fetchall()]
    assert_consistent(warehouse, loaded)

    again = subprocess.run(
        _cli(*sources, "--warehouse", warehouse, "-j", "2", "-q"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert_consistent(warehouse, _traces_under(*sources))


@pytest.mark.parametrize("unloaded", [False, True], ids=["before-unload", "after-unload"])
def test_reload_of_changed_file_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unloaded: bool
) -> None:
    """A changed file replaces its old version; Ctrl-C around that swap never leaves the
    path loaded twice, and the next run ends with the new version only."""
    from tracehouse.ingest import lake

    warehouse = tmp_path / "wh"
    trace = tmp_path / "job" / "rank-0.json"
    trace.parent.mkdir()
    doc = json.loads(gzip.decompress(sorted(DLRM.glob("*.pt.trace.json.gz"))[0].read_bytes()))
    trace.write_text(json.dumps(doc))
    assert len(ingest_paths([trace], warehouse, progress=False).loaded) == 1

    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]  # a new version
    trace.write_text(json.dumps(doc))
    _slice_events.cache_clear()
    real_remove = lake.remove_trace

    def interrupted_remove(*args: object) -> None:
        if unloaded:
            real_remove(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(lake, "remove_trace", interrupted_remove)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths([trace], warehouse, progress=False, stream=io.StringIO())
    assert not list((warehouse / "lake").rglob("*.tmp"))
    with _connect(warehouse) as con:
        assert con.execute("select count(*) from traces").fetchone()[0] == (0 if unloaded else 1)

    monkeypatch.undo()
    result = ingest_paths([trace], warehouse, progress=False, stream=io.StringIO())
    assert result.exit_code == 0 and len(result.loaded) == 1
    assert_consistent(warehouse, [trace.resolve()])
