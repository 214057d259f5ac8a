"""Native Kineto ingest on the real traces in ../shared/data/kineto.

Every expectation is computed from the trace files themselves with the
standard library's ``json`` (an independent reader), never copied from the
parser's output.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.runner import ingest_paths

KINETO = SHARED_DATA / "kineto"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not KINETO.is_dir(), reason=f"shared traces not found at {KINETO}"),
]


def _events(path: str) -> tuple[dict, list[dict]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        doc = json.load(handle, parse_float=Decimal)
    return doc, doc["traceEvents"]


def _lake(con: duckdb.DuckDBPyConnection, warehouse: Path) -> None:
    for table in ("traces", "slices", "flows", "threads", "processes", "process_groups",
                  "ingest_errors"):
        glob = str(warehouse / "lake" / table / "**" / "*.parquet")
        con.execute(f"create view {table} as select * from read_parquet('{glob}', "
                    "union_by_name = true, hive_partitioning = false)")


#: Two ranks of a 128-rank job that sit in ``single_rank/`` beside a 2-rank job's trace.
SAMPLED = sorted((KINETO / "single_rank").glob("sampled_128rank_job_rank-*.json.gz"))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    """All shared Kineto traces ingested (two workers) into one warehouse: the whole
    folder first, then the two traces of the 128-rank job and the 2-rank job's
    trace, which the first ingest refuses to mix in one run, each into a run of
    their own."""
    warehouse = tmp_path_factory.mktemp("kineto") / "wh"
    result = ingest_paths([KINETO], warehouse=warehouse, jobs=2, progress=False)
    own_run = ingest_paths(SAMPLED, warehouse=warehouse, run="sampled_128rank", jobs=2,
                           progress=False)
    a100 = ingest_paths([KINETO / "single_rank" / "a100_nccl_pg_args.json.gz"],
                        warehouse=warehouse, run="single_rank", progress=False)
    result.loaded += own_run.loaded + a100.loaded
    result.failed_first = result.failed  # type: ignore[attr-defined]
    result.failed = own_run.failed + a100.failed
    con = duckdb.connect()
    _lake(con, warehouse)
    yield warehouse, result, con
    con.close()


def test_every_shared_trace_loads(loaded) -> None:
    _warehouse, result, con = loaded
    assert result.failed == [], [f.line() for f in result.failed]
    files = sorted(p for p in KINETO.rglob("*.json.gz"))
    assert len(result.loaded) == len(files)
    assert con.execute("select count(*) from traces").fetchone()[0] == len(files)
    assert result.skipped == []  # topology.json is loaded (counted as a topology file)
    assert {Path(p).name for p, _run, _rows in result.topologies} == {"topology.json"}


def test_unrelated_jobs_in_one_folder_are_reported_not_merged(loaded) -> None:
    """Issue 15: ``single_rank/`` holds a world-2 trace and two world-128 traces; one
    run must not mix them (two rank-0 traces of different jobs). Issue 29: nor may
    the file that sorts first take the run: every trace is an error naming both
    jobs' files and world sizes, and the ``--run`` fix (tests/test_ingest_mixed_jobs.py)."""
    _warehouse, result, _con = loaded
    failed = {Path(f.path).name: f for f in result.failed_first}
    assert set(failed) == {p.name for p in SAMPLED} | {"a100_nccl_pg_args.json.gz"}
    for f in failed.values():
        assert f.kind == "mixed_jobs"
        assert "world size 128" in f.message and "world size 2" in f.message
        assert "a100_nccl_pg_args.json.gz" in f.message and "--run" in f.hint


def test_event_counts_match_each_file(loaded) -> None:
    """Every X event is a slice, every i event an instant, every s/f pair a flow."""
    _warehouse, _result, con = loaded
    rows = con.execute(
        "select t.path, t.trace_id, t.event_count, "
        "(select count(*) from slices s where s.trace_id = t.trace_id and s.phase = 'X'), "
        "(select count(*) from slices s where s.trace_id = t.trace_id and s.phase = 'i'), "
        "(select count(*) from flows f where f.trace_id = t.trace_id) "
        "from traces t"
    ).fetchall()
    assert rows
    for path, _trace_id, event_count, x_slices, instants, flows in rows:
        _doc, events = _events(path)
        assert event_count == len(events), path
        assert x_slices == sum(1 for e in events if e.get("ph") == "X"), path
        assert instants == sum(1 for e in events if e.get("ph") in ("i", "I")), path
        starts = collections.Counter((e["cat"], e["id"]) for e in events if e.get("ph") == "s")
        finishes = collections.Counter((e["cat"], e["id"]) for e in events if e.get("ph") == "f")
        pairs = sum(min(n, finishes[key]) for key, n in starts.items())
        assert flows == pairs, path


def test_timestamps_are_absolute_exact_nanoseconds(loaded) -> None:
    """Every slice of every shared trace: ts_ns = baseTimeNanoseconds + ts_us * 1000 and
    dur_ns = dur_us * 1000, exactly (digits read with Decimal, not floats)."""
    _warehouse, _result, con = loaded
    for path in sorted(KINETO.rglob("*.json.gz")):
        doc, events = _events(str(path))
        base = int(doc.get("baseTimeNanoseconds", 0))
        expected = [
            (base + int((Decimal(e["ts"]) * 1000).to_integral_value()),
             int((Decimal(e.get("dur", 0) if e["ph"] == "X" else 0) * 1000)
                 .to_integral_value()))
            for e in events if e.get("ph") in ("X", "i", "I")
        ]
        got = con.execute(
            "select s.ts, s.dur from slices s join traces t using (trace_id) "
            "where t.path = ? order by s.slice_id",
            [str(path.resolve())],
        ).fetchall()
        assert [tuple(r) for r in got] == expected, path


def test_ac2g_flows_link_each_launch_to_its_kernel(loaded) -> None:
    _warehouse, _result, con = loaded
    total, linked = con.execute(
        "select count(*), count(*) filter (where so.category = 'cuda_runtime' "
        "and si.category in ('kernel', 'gpu_memcpy', 'gpu_memset') "
        "and so.correlation = si.correlation) "
        "from flows f join slices so on so.trace_id = f.trace_id and so.slice_id = f.slice_out "
        "join slices si on si.trace_id = f.trace_id and si.slice_id = f.slice_in "
        "where f.category = 'ac2g'"
    ).fetchone()
    assert total > 5000
    # dlrm has 3 launches whose flow id repeats on one stream; all others link exactly.
    assert linked >= total - 3


def test_partial_overlaps_are_kept_and_flagged(loaded) -> None:
    """gloo:send/recv waits outlive their parent frame: Perfetto drops them, we keep them."""
    _warehouse, _result, con = loaded
    flagged = dict(con.execute(
        "select name, count(*) from slices where is_partial_overlap group by name"
    ).fetchall())
    assert flagged.get("gloo:send", 0) > 0 and flagged.get("gloo:recv", 0) > 0
    # A flagged slice's parent fully contains it; every other child lies inside its parent.
    bad = con.execute(
        "select count(*) from slices c join slices p "
        "on p.trace_id = c.trace_id and p.slice_id = c.parent_id "
        "where c.ts < p.ts or c.ts + c.dur > p.ts + p.dur or c.track_id <> p.track_id "
        "or c.depth <> p.depth + 1"
    ).fetchone()[0]
    assert bad == 0
    per_trace = con.execute(
        "select sum(partial_overlap_count) = (select count(*) from slices where "
        "is_partial_overlap) from traces"
    ).fetchone()[0]
    assert per_trace


def test_profiler_steps_and_iteration_folders(loaded) -> None:
    _warehouse, _result, con = loaded
    rows = dict(con.execute(
        "select regexp_extract(path, '[^/]+$'), [iteration, min_profiler_step, "
        "max_profiler_step] from traces"
    ).fetchall())
    assert rows["a100_nccl_pg_args.json.gz"] == [None, 4, 6]
    assert rows["rank_0003_iter_5.pt.trace.json.gz"] == [5, 5, 5]
    assert rows["sampled_128rank_job_rank-1.json.gz"] == [None, 551, 552]


def test_runs_ranks_and_layouts(loaded) -> None:
    _warehouse, _result, con = loaded
    runs = dict(con.execute(
        "select run_id, [count(*), count(distinct rank), min(rank), max(rank)] "
        "from traces group by run_id"
    ).fetchall())
    assert runs == {
        "dlrm_8rank": [8, 8, 0, 7],
        "tp1_pp4_dp2": [8, 8, 0, 7],
        "tp2_pp2_dp2": [16, 8, 0, 7],
        "tp2_pp2_dp1_vpp2": [4, 4, 0, 3],
        "single_rank": [1, 1, 0, 0],
        "sampled_128rank": [2, 2, 0, 1],
    }
    layouts = dict(
        con.execute("select run_id, any_value(layout) from traces group by 1").fetchall()
    )
    assert layouts["tp1_pp4_dp2"] == "megatron_traceviz"
    assert layouts["dlrm_8rank"] == "tensorboard"


def test_typed_comm_args(loaded) -> None:
    _warehouse, _result, con = loaded
    rows = con.execute(
        "select collective_name, process_group_desc, process_group_ranks, group_size, dtype, "
        "count(*) from slices where collective_name = 'allreduce' and name = "
        "'record_param_comms' group by all"
    ).fetchall()
    assert rows and all(r[1] == "default_pg" and r[2] == [0, 1] and r[3] == 2 for r in rows)
    _doc, events = _events(str(KINETO / "single_rank" / "a100_nccl_pg_args.json.gz"))
    expected = sum(1 for e in events if e.get("ph") == "X"
                   and e.get("args", {}).get("Collective name") == "allreduce")
    got = con.execute("select count(*) from slices where collective_name = 'allreduce'").fetchone()
    assert got[0] == expected


def test_process_groups_from_pg_config(loaded) -> None:
    _warehouse, _result, con = loaded
    groups = dict(con.execute(
        "select pg.pg_desc, pg.ranks from process_groups pg join traces t using (trace_id) "
        "where t.run_id = 'tp2_pp2_dp2' and t.rank = 0 and t.iteration = 3"
    ).fetchall())
    assert groups["TENSOR_MODEL_PARALLEL_GROUP"] == [0, 1]
    assert groups["PIPELINE_MODEL_PARALLEL_GROUP"] == [0, 4]
    assert groups["DATA_PARALLEL_GROUP"] == [0, 2]


def test_threads_processes_and_gpu_tracks(loaded) -> None:
    _warehouse, _result, con = loaded
    rows = con.execute(
        "select th.tid, th.thread_name, th.is_gpu from threads th join traces t using (trace_id) "
        "where t.path like '%a100_nccl_pg_args%' order by th.track_id"
    ).fetchall()
    _doc, events = _events(str(KINETO / "single_rank" / "a100_nccl_pg_args.json.gz"))
    gpu_tids = {str(e["tid"]) for e in events if e.get("ph") == "X" and e.get("cat") in
                ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")}
    gpu = [r for r in rows if r[2]]
    assert {r[0] for r in gpu} == gpu_tids and len(gpu_tids) >= 2
    assert all(r[1].startswith(f"stream {r[0]}") for r in gpu)
    assert any(r[1] == "thread 2910249 (pt_main_thread)" for r in rows)
    names = {r[0] for r in con.execute("select process_name from processes").fetchall()}
    assert "python3.10" in names
    # every slice's track exists in threads
    orphans = con.execute(
        "select count(*) from slices s anti join threads th "
        "on th.trace_id = s.trace_id and th.track_id = s.track_id"
    ).fetchone()[0]
    assert orphans == 0


def test_rerun_loads_nothing_new(loaded) -> None:
    warehouse, first, _con = loaded
    again = ingest_paths([KINETO], warehouse=warehouse, jobs=1, progress=False)
    assert again.loaded == []
    assert sorted(Path(f.path).name for f in again.failed) == [p.name for p in SAMPLED]
    assert again.topologies == []  # unchanged: skipped, like the traces
    assert len(again.skipped) == (len(first.loaded) - len(SAMPLED) + len(first.skipped)
                                  + len(first.topologies))
    own_run = ingest_paths(SAMPLED, warehouse=warehouse, run="sampled_128rank",
                           progress=False)
    assert own_run.loaded == [] and own_run.failed == [] and len(own_run.skipped) == 2


def test_changed_file_is_reloaded_and_touched_file_is_not(tmp_path: Path) -> None:
    source = next((KINETO / "dlrm_8rank").glob("worker3_*"))
    folder = tmp_path / "job"
    folder.mkdir()
    copy = folder / "rank-3.json.gz"
    shutil.copy(source, copy)
    warehouse = tmp_path / "wh"
    assert len(ingest_paths([folder], warehouse=warehouse, progress=False).loaded) == 1

    os.utime(copy, ns=(1, 1))  # same bytes, new mtime: hashed, found identical, skipped
    touched = ingest_paths([folder], warehouse=warehouse, progress=False)
    assert touched.loaded == [] and touched.skipped[0][1] == "already loaded, same content"

    doc, events = _events(str(source))
    kept = [e for e in events if e.get("name") != "cudaLaunchKernel"]
    doc["traceEvents"] = kept
    with gzip.open(copy, "wt") as handle:
        json.dump(doc, handle, default=str)
    changed = ingest_paths([folder], warehouse=warehouse, progress=False)
    assert len(changed.loaded) == 1
    con = duckdb.connect()
    _lake(con, warehouse)
    assert con.execute("select count(*) from traces").fetchone()[0] == 1
    n_x = sum(1 for e in kept if e.get("ph") == "X")
    assert con.execute("select count(*) from slices where phase = 'X'").fetchone()[0] == n_x


def test_force_reloads(tmp_path: Path) -> None:
    folder = KINETO / "single_rank"
    warehouse = tmp_path / "wh"
    ingest_paths([folder / "a100_nccl_pg_args.json.gz"], warehouse=warehouse, run="one",
                 progress=False)
    forced = ingest_paths([folder], warehouse=warehouse, run="one", force=True, progress=False)
    # Re-loading replaces each path's own earlier version: the world-2 trace
    # holds the run, and the world-128 ones still clash with it.
    assert {Path(f.path).name for f in forced.failed} == {p.name for p in SAMPLED}
    assert len(forced.loaded) == 1
    con = duckdb.connect()
    _lake(con, warehouse)
    assert con.execute("select count(*), count(distinct trace_id) from traces").fetchone() == (1, 1)


def test_process_groups_from_comm_args_when_pg_config_is_missing(tmp_path: Path) -> None:
    with gzip.open(KINETO / "single_rank" / "a100_nccl_pg_args.json.gz") as handle:
        doc = json.load(handle)
    del doc["distributedInfo"]["pg_config"]
    named = {(e["args"]["Process Group Name"], e["args"]["Process Group Description"],
              e["args"]["Process Group Ranks"])
             for e in doc["traceEvents"] if e.get("args", {}).get("Process Group Name")}
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "rank-0.json").write_text(json.dumps(doc))
    warehouse = tmp_path / "wh"
    assert ingest_paths([folder], warehouse=warehouse, progress=False).failed == []
    con = duckdb.connect()
    _lake(con, warehouse)
    rows = con.execute("select source, pg_name, pg_desc, ranks from process_groups").fetchall()
    expected = sorted(("comm_args", name, desc, json.loads(ranks)) for name, desc, ranks in named)
    assert sorted(tuple(r) for r in rows) == expected and expected
