"""Ingest of Nsight Systems SQLite exports into the lake (ingest/nsys/parse.py).

Real exports from ../shared/data/nsys: every kernel, copy, fill, runtime
call and NVTX event lands (counts equal the SQLite's), one rank per GPU,
flows link each call to the GPU work with its correlation id. Small
exports written here with sqlite3 hold what the real ones lack: hostile
strings, invalid UTF-8, columns an older nsys does not write. Bad files get
one error each while good ones land, and nothing partial is written.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest

from conftest import NASTY_NAME, SHARED_DATA
from nsys_export import GLOBAL_TID, write_export
from tracehouse.ingest.discover import discover
from tracehouse.ingest.runner import ingest_paths

NSYS = SHARED_DATA / "nsys"
KINETO_RANK0 = next(iter(sorted((SHARED_DATA / "kineto" / "dlrm_8rank").glob("worker0_*"))),
                    None) if (SHARED_DATA / "kineto" / "dlrm_8rank").is_dir() else None

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not NSYS.is_dir(), reason=f"shared data missing: {NSYS}"),
]


def _lake(root: Path, sql: str, params: list | None = None) -> list[tuple]:
    """Query the lake's Parquet directly (committed traces only, as readers do)."""
    with duckdb.connect() as con:
        for table in ("slices", "flows", "threads", "traces", "processes"):
            glob = str(root / "lake" / table / "**" / "*.parquet")
            con.execute(f"create view {table} as select * from "
                        f"read_parquet('{glob}', union_by_name = true)")
        return con.execute(sql, params or []).fetchall()


def _sqlite_counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as con:
        def count(sql: str) -> int:
            return con.execute(sql).fetchone()[0]
        return {
            "kernel": count("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"),
            "gpu_memcpy": count("select count(*) from CUPTI_ACTIVITY_KIND_MEMCPY"),
            "gpu_memset": count("select count(*) from CUPTI_ACTIVITY_KIND_MEMSET"),
            "cuda_runtime": count("select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME"),
            "nvtx": count("select count(*) from NVTX_EVENTS where eventType in (59, 60)"),
            "nvtx_mark": count("select count(*) from NVTX_EVENTS where eventType = 34"),
        }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nsys_lake")
    for name in ("mfu_2gpu_before", "h100_2gpu_1s"):
        result = ingest_paths([NSYS / f"{name}.sqlite"], warehouse=root, run=name,
                              progress=False)
        assert not result.failed, result.failed
    return root


@pytest.mark.parametrize("name", ["mfu_2gpu_before", "h100_2gpu_1s"])
def test_every_record_lands(loaded: Path, name: str) -> None:
    expected = _sqlite_counts(NSYS / f"{name}.sqlite")
    got = dict(_lake(loaded, "select category, count(*) from slices where run_id = ? "
                             "group by 1", [name]))
    assert {key: got.get(key, 0) for key in expected} == expected
    assert expected["kernel"] > 3000 and expected["nvtx"] > 15000


def test_one_rank_per_gpu(loaded: Path) -> None:
    with sqlite3.connect(NSYS / "mfu_2gpu_before.sqlite") as con:
        per_device = dict(con.execute(
            "select deviceId, count(*) from CUPTI_ACTIVITY_KIND_KERNEL group by 1"))
    rows = _lake(loaded, """
        select traces.rank, traces.file_format, traces.layout, count(*)
        from slices inner join traces using (trace_id)
        where slices.run_id = 'mfu_2gpu_before' and slices.category = 'kernel'
        group by all order by 1""")
    assert [(rank, count) for rank, _f, _l, count in rows] == sorted(per_device.items())
    assert {(f, layout) for _r, f, layout, _c in rows} == {("nsys_sqlite", "nsys")}
    # Each rank holds its own process's CPU rows: rank 0's calls are pid 144's.
    pids = _lake(loaded, """
        select distinct slices.rank, threads.pid from slices inner join threads
            on slices.trace_id = threads.trace_id and slices.track_id = threads.track_id
        where slices.run_id = 'mfu_2gpu_before' and slices.category = 'cuda_runtime'
        order by 1""")
    assert pids == [(0, "144"), (1, "145")]


def test_flows_link_calls_to_their_gpu_work(loaded: Path) -> None:
    rows = _lake(loaded, """
        select flows.category, cpu.category, gpu.category, cpu.correlation = gpu.correlation,
            count(*)
        from flows
        inner join slices as cpu
            on flows.trace_id = cpu.trace_id and flows.slice_out = cpu.slice_id
        inner join slices as gpu
            on flows.trace_id = gpu.trace_id and flows.slice_in = gpu.slice_id
        where flows.run_id = 'mfu_2gpu_before'
        group by all""")
    assert {row[:4] for row in rows} <= {
        ("ac2g", "cuda_runtime", gpu, True) for gpu in ("kernel", "gpu_memcpy", "gpu_memset")}
    with sqlite3.connect(NSYS / "mfu_2gpu_before.sqlite") as con:
        launched = con.execute("""
            select count(*) from CUPTI_ACTIVITY_KIND_KERNEL as k where exists (
                select 1 from CUPTI_ACTIVITY_KIND_RUNTIME as r
                where r.correlationId = k.correlationId
                    and (r.globalTid >> 24) = (k.globalPid >> 24))""").fetchone()[0]
    kernel_flows = sum(count for *key, count in rows if key[2] == "kernel")
    assert kernel_flows == launched


def test_nvtx_nests_launches_and_times_are_utc(loaded: Path) -> None:
    (nested,), = _lake(loaded, """
        select count(*) from slices as call inner join slices as range
            on call.trace_id = range.trace_id and call.parent_id = range.slice_id
        where call.category = 'cuda_runtime' and range.category = 'nvtx'""")
    assert nested > 1000
    with sqlite3.connect(NSYS / "mfu_2gpu_before.sqlite") as con:
        utc, clock = con.execute(
            "select utcEpochNs, systemClockNs from TARGET_INFO_SESSION_START_TIME").fetchone()
        first = con.execute("select min(start) from CUPTI_ACTIVITY_KIND_KERNEL "
                            "where deviceId = 0").fetchone()[0]
    (ts, base), = _lake(loaded, """
        select min(slices.ts), any_value(traces.base_time_ns) from slices
        inner join traces using (trace_id)
        where slices.run_id = 'mfu_2gpu_before' and traces.rank = 0
            and slices.category = 'kernel'""")
    assert base == utc - clock and ts == first + base


def test_discovery_finds_exports_by_suffix_and_magic(tmp_path: Path) -> None:
    shutil.copyfile(NSYS / "h100_2gpu_1s.sqlite", tmp_path / "capture.db")  # by magic bytes
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "report.nsys-rep").write_bytes(b"\0" * 64)  # by suffix
    found = discover([NSYS, tmp_path])
    layouts = {path.name: trace.layout for trace in found.traces
               for path in [trace.path]}
    assert layouts == {"mfu_2gpu_before.sqlite": "nsys", "h100_2gpu_1s.sqlite": "nsys",
                       "capture.db": "nsys", "report.nsys-rep": "nsys"}


def test_hostile_strings_and_huge_ids_survive(tmp_path: Path) -> None:
    big = 2**63 - 1
    write_export(tmp_path / "rank-3.sqlite",
                 kernels=[(2000, 3000, 7, NASTY_NAME, big)], launches=[(1100, 1200, big)],
                 ranges=[(1000, 1500, b"step \xff\xfe <script>")])
    result = ingest_paths([tmp_path / "rank-3.sqlite"], warehouse=tmp_path / "wh",
                          run="hostile", progress=False)
    assert not result.failed, result.failed
    rows = dict(_lake(tmp_path / "wh", "select category, name from slices"))
    assert rows["kernel"] == NASTY_NAME
    assert rows["nvtx"] == "step \ufffd\ufffd <script>"
    assert rows["cuda_runtime"] == "cudaLaunchKernel"
    (rank, correlation, flows), = _lake(tmp_path / "wh", """
        select slices.rank, slices.correlation, (select count(*) from flows)
        from slices where category = 'kernel'""")
    assert (rank, correlation, flows) == (3, big, 1)  # rank from the file name


def test_bad_files_reported_good_ones_land(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-nsys-here"))  # no `nsys` to export with
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copyfile(NSYS / "mfu_2gpu_before.sqlite", folder / "node1_rank-4.sqlite")
    if KINETO_RANK0 is not None:  # a folder mixing Kineto and Nsight files
        shutil.copyfile(KINETO_RANK0, folder / KINETO_RANK0.name)
    data = (NSYS / "h100_2gpu_1s.sqlite").read_bytes()
    (folder / "cut.sqlite").write_bytes(data[: len(data) // 2])
    with sqlite3.connect(folder / "other.sqlite") as con:
        con.execute("create table customers (id integer)")
    (folder / "garbage.sqlite").write_bytes(b"this is not sqlite at all")
    (folder / "run.nsys-rep").write_bytes(b"\0" * 128)

    result = ingest_paths([folder], warehouse=tmp_path / "wh", progress=False)

    failed = {Path(f.path).name: f.kind for f in result.failed}
    assert failed == {"cut.sqlite": "truncated", "other.sqlite": "not_nsys",
                      "garbage.sqlite": "not_nsys", "run.nsys-rep": "nsys_rep_needs_export"}
    assert all(f.message and f.hint for f in result.failed)
    rep = next(f for f in result.failed if f.kind == "nsys_rep_needs_export")
    assert "nsys export --type sqlite" in rep.hint
    loaded = sorted((Path(item.path).name, item.rank) for item in result.loaded)
    expected = [("node1_rank-4.sqlite", 4), ("node1_rank-4.sqlite", 5)]
    if KINETO_RANK0 is not None:
        expected = sorted(expected + [(KINETO_RANK0.name, 0)])
    assert loaded == expected
    # Nothing partial: every file in the lake belongs to a committed trace.
    committed = {row[0] for row in _lake(tmp_path / "wh", "select trace_id from traces")}
    written = {p.stem for p in (tmp_path / "wh" / "lake").rglob("run=*/*.parquet")
               if p.parent.parent.name in ("slices", "flows", "threads", "processes")}
    assert written == committed
    assert not list((tmp_path / "wh" / "lake").rglob("*.tmp"))


def test_reload_replaces_every_gpu_of_the_file(tmp_path: Path) -> None:
    """A changed export replaces all the traces of the old one, not only the first GPU's."""
    path = tmp_path / "capture.sqlite"
    shutil.copyfile(NSYS / "h100_2gpu_1s.sqlite", path)
    root = tmp_path / "wh"
    first = ingest_paths([path], warehouse=root, run="r", progress=False)
    assert sorted(item.rank for item in first.loaded) == [0, 1]
    again = ingest_paths([path], warehouse=root, run="r", progress=False)
    assert not again.loaded and len(again.skipped) == 1
    os.chmod(path, 0o644)
    with sqlite3.connect(path) as con:  # the second GPU's work is gone from the new export
        con.execute("delete from CUPTI_ACTIVITY_KIND_KERNEL where deviceId = 1")
        con.execute("delete from CUPTI_ACTIVITY_KIND_MEMCPY where deviceId = 1")
        con.execute("delete from CUPTI_ACTIVITY_KIND_MEMSET where deviceId = 1")
    changed = ingest_paths([path], warehouse=root, run="r", progress=False)
    assert [item.rank for item in changed.loaded] == [0]
    assert _lake(root, "select rank from traces") == [(0,)]
    assert _lake(root, "select count(distinct trace_id) from slices") == [(1,)]


def _fake_nsys(folder: Path, body: str) -> None:
    """An `nsys` on PATH that runs ``body`` with $out set to the --output argument."""
    folder.mkdir(exist_ok=True)
    script = folder / "nsys"
    script.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do\n"
                      '  if [ "$1" = "--output" ]; then out="$2"; fi; shift\ndone\n' + body)
    script.chmod(0o755)


def test_nsys_rep_is_exported_with_nsys_on_path(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    _fake_nsys(bin_dir, f'cp "{NSYS / "h100_2gpu_1s.sqlite"}" "$out"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    report = tmp_path / "capture.nsys-rep"
    report.write_bytes(b"QdstrmFile not really")
    result = ingest_paths([report], warehouse=tmp_path / "wh", run="rep", progress=False)
    assert not result.failed, result.failed
    assert sorted(item.rank for item in result.loaded) == [0, 1]
    (path, fmt), = set(_lake(tmp_path / "wh", "select path, file_format from traces"))
    assert (Path(path).name, fmt) == ("capture.nsys-rep", "nsys_sqlite")

    _fake_nsys(bin_dir, 'echo "cannot open report: unsupported version" >&2\nexit 3\n')
    broken = tmp_path / "broken.nsys-rep"
    broken.write_bytes(b"junk")
    result = ingest_paths([broken], warehouse=tmp_path / "wh", run="rep", progress=False)
    (failure,) = result.failed
    assert failure.kind == "nsys_export_failed"
    assert "exited 3" in failure.message and "unsupported version" in failure.message


def test_graph_launch_domains_start_end_ranges_and_gpu_info(tmp_path: Path) -> None:
    """What the shared exports lack: a CUDA graph launch (one call, two kernels with its
    correlation id), a named NVTX domain, a start/end range, TARGET_INFO_GPU."""
    path = write_export(tmp_path / "features.sqlite",
                        kernels=[(2000, 3000, 7, "graph_node_a", 5),
                                 (3000, 4000, 7, "graph_node_b", 5)],
                        launches=[(1100, 1200, 5)], ranges=[(1000, 1500, "step")])
    with sqlite3.connect(path) as con:
        con.execute("update StringIds set value = 'cudaGraphLaunch_v10000' where id = 1")
        con.execute("insert into NVTX_EVENTS values (900, null, 75, 'NCCL', ?, null, 1)",
                    [GLOBAL_TID])
        con.execute("insert into NVTX_EVENTS values (1000, 1600, 60, 'async', ?, null, 1)",
                    [GLOBAL_TID])
        con.executescript("""
            create table TARGET_INFO_GPU (id integer, name text, busLocation text,
                smCount integer, totalMemory integer, chipName text, memoryBandwidth integer);
            insert into TARGET_INFO_GPU values (9, 'NVIDIA H100 80GB HBM3', '0000:1b:00.0',
                132, 85520809984, 'GH100', 3352320000000);
            create table TARGET_INFO_CUDA_DEVICE (gpuId integer, cudaId integer);
            insert into TARGET_INFO_CUDA_DEVICE values (9, 0);
        """)
    result = ingest_paths([path], warehouse=tmp_path / "wh", run="f", progress=False)
    assert not result.failed, result.failed
    root = tmp_path / "wh"
    flows = _lake(root, """
        select cpu.name, gpu.name from flows
        inner join slices as cpu on flows.slice_out = cpu.slice_id
        inner join slices as gpu on flows.slice_in = gpu.slice_id order by 2""")
    assert flows == [("cudaGraphLaunch", "graph_node_a"), ("cudaGraphLaunch", "graph_node_b")]
    ranges = _lake(root, """
        select slices.name, threads.thread_name, threads.tid,
            json_extract_string(slices.args, '$.domain')
        from slices inner join threads using (trace_id, track_id)
        where slices.category = 'nvtx' order by 1""")
    assert ranges == [("async", "NVTX start/end ranges (domain 1)", "nvtx domain 1", "NCCL"),
                      ("step", None, "43", None)]
    (props,), = _lake(root, "select device_properties from traces")
    assert json.loads(props)[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert json.loads(props)[0]["numSms"] == 132


def test_summary_names_what_was_read(tmp_path: Path) -> None:
    """An Nsight ingest is not "MB of JSON": the line says what the input was."""
    path = write_export(tmp_path / "one.sqlite", kernels=[(2000, 3000, 7, "k", 1)],
                        launches=[(1100, 1200, 1)], ranges=[(1000, 1500, "step")])
    result = ingest_paths([path], warehouse=tmp_path / "wh", run="one", progress=False)
    line = result.summary()
    megabytes = path.stat().st_size / 1e6
    assert f"({megabytes:.1f} MB of Nsight SQLite, " in line and "JSON" not in line
    if KINETO_RANK0 is not None:
        mixed = ingest_paths([KINETO_RANK0], warehouse=tmp_path / "wh", run="k",
                             progress=False).summary()
        assert "MB of Kineto JSON, " in mixed and "SQLite" not in mixed
