"""`tracehouse nsys` views against nsys-ai 0.3.0, the oracle, on the real Nsight exports.

Both shared exports are ingested into one warehouse and the nsys marts
built once per session; every view is then a query on those marts. nsys-ai
computes the same figures from the SQLite file itself (its sqlite3 path:
DuckDB's sqlite extension would be downloaded, so its opener is made to
fail and nsys-ai falls back, as it does on any machine without it). It
reads a copy in a temporary folder, because it writes a cache and a lock
file beside the profile.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_DATA
from nsys_export import write_megatron_phases_export, write_two_step_export
from tracehouse.build.dbt import build_warehouse
from tracehouse.cli import main
from tracehouse.nsys_views.load import ingest_file
from tracehouse.nsys_views.queries import query_view

NSYS = SHARED_DATA / "nsys"
FILES = ("mfu_2gpu_before", "h100_2gpu_1s")
TOLERANCE_MS = 0.1

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not NSYS.is_dir(), reason=f"shared data missing: {NSYS}"),
]


@pytest.fixture(scope="session")
def nsys_warehouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    """Both exports and a hand-made one in one warehouse, built once."""
    root = tmp_path_factory.mktemp("nsys_wh")
    trace_ids = {name: ingest_file(NSYS / f"{name}.sqlite", root) for name in FILES}
    synthetic = write_two_step_export(tmp_path_factory.mktemp("nsys_synthetic") / "steps.sqlite")
    trace_ids["steps"] = ingest_file(synthetic, root)
    markers = write_two_step_export(synthetic.with_name("markers.sqlite"), "train_step_{step}")
    trace_ids["markers"] = ingest_file(markers, root)
    phases = write_megatron_phases_export(synthetic.with_name("phases.sqlite"))
    trace_ids["phases"] = ingest_file(phases, root)
    # The whole project with its data tests (grain, parts adding up) on Nsight data;
    # `tracehouse nsys` itself builds only the nsys marts and what they read.
    build_warehouse(root)
    return root, trace_ids


@pytest.fixture(scope="session")
def nsys_ai(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """nsys-ai's analysis functions, opening copies of the exports offline."""
    pytest.importorskip("nsys_ai", reason="nsys-ai (the oracle) is not installed: "
                        "pip install -e '.[dev]'")
    from nsys_ai import parquet_cache, profile
    from nsys_ai.overlap import detect_iterations, nccl_breakdown, overlap_analysis
    from nsys_ai.summary import gpu_summary

    def offline(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("DuckDB sqlite extension not available offline")

    patched = {"open_auto_db": parquet_cache.open_auto_db,
               "open_direct_sqlite": parquet_cache.open_direct_sqlite}
    for name in patched:
        setattr(parquet_cache, name, offline)
    copies = tmp_path_factory.mktemp("nsys_ai")

    class Oracle:
        def figures(self, name: str, trim: tuple[int, int] | None = None) -> dict[int, dict]:
            copy = copies / f"{name}.sqlite"
            if not copy.exists():
                shutil.copyfile(NSYS / f"{name}.sqlite", copy)
            out = {}
            with profile.open(str(copy)) as prof:
                for device in prof.meta.devices:
                    out[device] = {
                        "summary": gpu_summary(prof, device, trim),
                        "overlap": overlap_analysis(prof, device, trim),
                        "nccl": nccl_breakdown(prof, device, trim),
                        "iters": detect_iterations(prof, device, trim) if trim is None else None,
                    }
            return out

    yield Oracle()
    for name, original in patched.items():
        setattr(parquet_cache, name, original)


def _close(ours: float, theirs: float) -> bool:
    # nsys-ai rounds to 0.01 ms; we keep 0.001 ms.
    return abs(ours - theirs) <= TOLERANCE_MS


@pytest.mark.parametrize("name", FILES)
def test_summary_overlap_nccl_equal_nsys_ai(name: str, nsys_warehouse, nsys_ai) -> None:
    root, trace_ids = nsys_warehouse
    oracle = nsys_ai.figures(name)
    summary = {row["gpu"]: row for row in query_view(root, "summary", trace_ids[name])}
    overlap = {row["gpu"]: row for row in query_view(root, "overlap", trace_ids[name])}
    nccl = query_view(root, "nccl", trace_ids[name])
    assert set(summary) == set(overlap) == set(oracle)
    for gpu, expected in oracle.items():
        ours = summary[gpu]
        assert {"gpu", "kernels", "span_ms", "compute_ms", "idle_ms", "util_pct"} <= set(ours)
        timing = expected["summary"]["timing"]
        assert ours["kernels"] == expected["summary"]["kernel_count"]
        for key in ("span_ms", "compute_ms", "idle_ms"):
            assert _close(ours[key], timing[key]), (gpu, key, ours[key], timing[key])
        assert abs(ours["util_pct"] - timing["utilization_pct"]) <= 0.1
        top = [(k["name"], k["count"]) for k in ours["top_kernels"]]
        assert top[:5] == [(k["name"], k["count"]) for k in expected["summary"]["top_kernels"][:5]]

        ours = overlap[gpu]
        theirs = expected["overlap"]
        assert set(ours) >= {"gpu", "span_ms", "compute_only_ms", "nccl_only_ms", "overlap_ms",
                             "idle_ms"}
        for key, their_key in (("span_ms", "total_ms"), ("compute_only_ms", "compute_only_ms"),
                               ("nccl_only_ms", "nccl_only_ms"), ("overlap_ms", "overlap_ms"),
                               ("idle_ms", "idle_ms")):
            assert _close(ours[key], theirs[their_key]), (gpu, key, ours[key], theirs[their_key])
        assert ours["nccl_kernels"] == theirs["nccl_kernels"]

        ours_nccl = {(r["stream"], r["op"]): r for r in nccl if r["gpu"] == gpu}
        theirs_nccl = {(r["stream_id"], r["type"]): r for r in expected["nccl"]}
        assert set(ours_nccl) == set(theirs_nccl)
        for key, row in theirs_nccl.items():
            assert {"gpu", "op", "count", "total_ms"} <= set(ours_nccl[key])
            assert ours_nccl[key]["count"] == row["count"]
            assert _close(ours_nccl[key]["total_ms"], row["total_ms"])


@pytest.mark.parametrize("name", FILES)
def test_iterations_equal_nsys_ai(name: str, nsys_warehouse, nsys_ai) -> None:
    root, trace_ids = nsys_warehouse
    oracle = nsys_ai.figures(name)
    iters = query_view(root, "iters", trace_ids[name])
    for gpu, expected in oracle.items():
        ours = [row for row in iters if row["gpu"] == gpu]
        theirs = expected["iters"]
        assert len(ours) == len(theirs) > 0
        for mine, their in zip(ours, theirs):
            assert mine["heuristic"] == their["heuristic"]
            assert mine["kernel_count"] == their["kernel_count"]
            assert _close(mine["duration_ms"], their["duration_ms"])


def test_trim_equals_nsys_ai(nsys_ai, capsys: pytest.CaptureFixture[str]) -> None:
    """--trim through the CLI (a temporary warehouse, marts built for the window)."""
    start_s, end_s = 60.2, 60.35
    code = main(["nsys", "overlap", str(NSYS / "mfu_2gpu_before.sqlite"), "--trim",
                 str(start_s), str(end_s), "--gpu", "0", "--format", "json"])
    assert code == 0
    ours = json.loads(capsys.readouterr().out)
    theirs = nsys_ai.figures("mfu_2gpu_before", (int(start_s * 1e9), int(end_s * 1e9)))[0]
    assert [row["gpu"] for row in ours] == [0]
    assert _close(ours[0]["span_ms"], theirs["overlap"]["total_ms"])
    assert _close(ours[0]["compute_only_ms"], theirs["overlap"]["compute_only_ms"])
    assert _close(ours[0]["nccl_only_ms"], theirs["overlap"]["nccl_only_ms"])
    assert ours[0]["span_ms"] < 150.0 + TOLERANCE_MS  # the window, not the whole capture


def test_info_and_gpu_filter(nsys_warehouse) -> None:
    root, trace_ids = nsys_warehouse
    info = query_view(root, "info", trace_ids["mfu_2gpu_before"])
    assert [row["gpu"] for row in info] == [0, 1]
    assert [row["rank"] for row in info] == [0, 1]
    with sqlite3.connect(NSYS / "mfu_2gpu_before.sqlite") as con:
        by_device = dict(con.execute(
            "select deviceId, count(*) from CUPTI_ACTIVITY_KIND_KERNEL group by 1"))
        first = con.execute("select min(start) from CUPTI_ACTIVITY_KIND_KERNEL "
                            "where deviceId = 0").fetchone()[0]
    assert {row["gpu"]: row["kernels"] for row in info} == by_device
    # Times are shown on the capture clock, as nsys and --trim use it.
    assert info[0]["start_s"] == pytest.approx(first / 1e9, abs=1e-6)
    only = query_view(root, "summary", trace_ids["mfu_2gpu_before"], gpu=1)
    assert [row["gpu"] for row in only] == [1]


def _innermost_ranges(path: Path, device: int) -> dict[int, tuple[str, int]]:
    """Independent oracle for the NVTX map, from the SQLite file: for each kernel
    (by correlation id) the innermost push/pop range on its launching thread that
    encloses the launch call, and how many ranges enclose it."""
    with sqlite3.connect(path) as con:
        # Correlation ids are per process: two ranks' calls may share one.
        launches = con.execute(
            "select r.correlationId, r.globalTid, r.start, r.\"end\" "
            "from CUPTI_ACTIVITY_KIND_RUNTIME as r "
            "inner join CUPTI_ACTIVITY_KIND_KERNEL as k on r.correlationId = k.correlationId "
            "and (r.globalTid >> 24) = (k.globalPid >> 24) where k.deviceId = ?",
            [device]).fetchall()
        ranges = con.execute(
            "select n.globalTid, n.start, n.\"end\", coalesce(n.text, s.value) "
            "from NVTX_EVENTS as n left join StringIds as s on n.textId = s.id "
            "where n.eventType = 59 and n.\"end\" is not null").fetchall()
    by_thread: dict[int, list[tuple[int, int, str]]] = {}
    for tid, start, end, text in ranges:
        by_thread.setdefault(tid, []).append((start, end, text))
    out = {}
    for correlation, tid, start, end in launches:
        enclosing = [r for r in by_thread.get(tid, []) if r[0] <= start and r[1] >= end]
        if enclosing:
            inner = max(enclosing, key=lambda r: (r[0], -r[1]))
            out[correlation] = (inner[2], len(enclosing) - 1)
    return out


def test_kernel_nvtx_map_matches_sqlite(nsys_warehouse) -> None:
    import duckdb

    root, trace_ids = nsys_warehouse
    expected = _innermost_ranges(NSYS / "mfu_2gpu_before.sqlite", 0)
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        # fct_kernels.annotation_slice_id is each kernel's innermost range,
        # fct_annotation_ranges gives its name, depth and path.
        rows = con.execute("""
            select kernels.correlation, ranges.name, ranges.annotation_depth,
                ranges.annotation_path
            from fct_kernels as kernels
            left join fct_annotation_ranges as ranges
                on kernels.trace_id = ranges.trace_id
                and kernels.annotation_slice_id = ranges.slice_id
            where kernels.trace_id = ? and kernels.category = 'kernel'""",
                           [trace_ids["mfu_2gpu_before"][0]]).fetchall()
    ours = {c: (name, depth) for c, name, depth, _path in rows if name is not None}
    assert len(ours) == len(expected) > 1000
    assert ours == expected
    paths = [path for *_rest, path in rows if path]
    assert all(path.split(" > ")[-1] == name for (_c, name, _d, path) in rows if path)
    assert any(" > " in path for path in paths)


def test_tree_projects_ranges_onto_gpu(nsys_warehouse) -> None:
    root, trace_ids = nsys_warehouse
    tree = query_view(root, "tree", trace_ids["mfu_2gpu_before"], gpu=0)
    assert tree and all(node["kernels"] > 0 for node in tree)
    by_id = {node["id"]: node for node in tree}
    for node in tree:
        parent = by_id.get(node["parent_id"])
        if parent is not None:  # a child's kernels are its parent's kernels too
            assert parent["depth"] == node["depth"] - 1
            assert parent["kernels"] >= node["kernels"]
            assert parent["gpu_start_s"] <= node["gpu_start_s"]


def test_cli_table_and_bad_arguments(nsys_warehouse, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ids = nsys_warehouse
    target = str(NSYS / "mfu_2gpu_before.sqlite")
    assert main(["nsys", "nccl", target, "--warehouse", str(root)]) == 0
    out = capsys.readouterr().out
    assert "sendrecv" in out and "total_ms" in out
    assert main(["nsys", "--help"]) == 0
    assert "--warehouse" in capsys.readouterr().out
    assert main(["nsys", "overlap", target, "--trim", "2", "1"]) == 2
    assert main(["nsys", "overlap", str(NSYS / "missing.sqlite")]) == 2


def test_hand_worked_overlap_and_nccl(nsys_warehouse) -> None:
    """The two-step export of tests/nsys_export.py, figures worked out by hand."""
    root, trace_ids = nsys_warehouse
    (overlap,) = query_view(root, "overlap", trace_ids["steps"])
    assert {key: overlap[key] for key in ("span_ms", "compute_only_ms", "nccl_only_ms",
                                          "overlap_ms", "idle_ms", "overlap_pct")} == {
        "span_ms": 1.15, "compute_only_ms": 0.1, "nccl_only_ms": 0.1, "overlap_ms": 0.1,
        "idle_ms": 0.85, "overlap_pct": 50.0}
    (summary,) = query_view(root, "summary", trace_ids["steps"])
    assert (summary["kernels"], summary["compute_ms"], summary["idle_ms"]) == (4, 0.4, 0.85)
    (nccl,) = query_view(root, "nccl", trace_ids["steps"])
    assert (nccl["op"], nccl["stream"], nccl["count"], nccl["total_ms"]) == (
        "allreduce", 9, 2, 0.2)


def test_iterations_from_nvtx_markers(nsys_warehouse) -> None:
    root, trace_ids = nsys_warehouse
    iters = query_view(root, "iters", trace_ids["steps"])
    assert [(i["iteration"], i["text"], i["heuristic"], i["kernel_count"], i["duration_ms"],
             i["compute_ms"], i["nccl_ms"]) for i in iters] == [
        (0, "ProfilerStep#1", False, 2, 0.15, 0.1, 0.1),
        (1, "ProfilerStep#2", False, 2, 0.15, 0.1, 0.1)]


def test_nvtx_tree_and_rank_iterations_of_an_export(nsys_warehouse) -> None:
    import duckdb

    root, trace_ids = nsys_warehouse
    tree = query_view(root, "tree", trace_ids["steps"])
    assert [(n["path"], n["depth"], n["kernels"], n["gpu_ms"]) for n in tree] == [
        ("ProfilerStep#1", 0, 2, 0.15), ("ProfilerStep#1 > forward", 1, 2, 0.15),
        ("ProfilerStep#2", 0, 2, 0.15), ("ProfilerStep#2 > forward", 1, 2, 0.15)]
    # The core marts see the NVTX step ranges as profiler steps (iterations 1, 2).
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        rows = con.execute("""
            select iteration, span_ns, compute_ns, communication_ns, overlap_ns
            from fct_rank_iterations where run_id = 'nsys-steps' order by iteration
        """).fetchall()
    assert rows == [(1, 150_000, 100_000, 100_000, 50_000), (2, 150_000, 100_000, 100_000, 50_000)]


def test_gpu_overlap_equals_the_rank_iterations_sums(nsys_warehouse) -> None:
    """One answer per question: fct_nsys_gpu_overlap (what the summary and overlap
    views read, built without the step chain) holds fct_rank_iterations' compute,
    communication and overlap summed per GPU, on every export of the warehouse
    (the shared ones, one or several iterations per GPU)."""
    import duckdb

    root, trace_ids = nsys_warehouse
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        sums = con.execute("""
            select run_id, rank, cast(sum(compute_ns) as bigint),
                cast(sum(communication_ns) as bigint), cast(sum(overlap_ns) as bigint)
            from fct_rank_iterations where compute_ns is not null
            group by run_id, rank order by run_id, rank""").fetchall()
        ours = con.execute("""
            select run_id, rank, compute_ns, communication_ns, overlap_ns
            from fct_nsys_gpu_overlap order by run_id, rank""").fetchall()
        runs = {run for (run,) in con.execute(
            "select distinct run_id from stg_lake__traces where trace_id in "
            "(select unnest(?::varchar[]))", [[t for ids in trace_ids.values() for t in ids]]
        ).fetchall()}
    assert ours == sums
    assert {row[0] for row in ours} == runs and len(ours) >= 2 * len(FILES)
    # The hand-made export's two ProfilerSteps (see the test above) add up.
    assert [row[2:] for row in ours if row[0] == "nsys-steps"] == [(200_000, 200_000, 100_000)]
    assert all(row[2] > 0 for row in ours if row[0] in {"nsys-" + name for name in FILES})


def test_nvtx_markers_and_the_gap_rule_are_step_rules(nsys_warehouse) -> None:
    import duckdb

    root, trace_ids = nsys_warehouse
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        def run_of(name: str) -> str:
            [(run,)] = con.execute("select distinct run_id from intermediate.int_traces_loaded "
                                   "where trace_id = ?", [trace_ids[name][0]]).fetchall()
            return run

        def steps(name: str) -> list[tuple]:
            return con.execute("""
                select rank, iteration, step_rule, span_ns, compute_ns, communication_ns,
                    overlap_ns
                from fct_rank_iterations where run_id = ? order by rank, iteration""",
                               [run_of(name)]).fetchall()

        def nsys_iterations(name: str) -> list[tuple]:
            return con.execute("""
                select rank, count(*) from fct_nsys_iterations where run_id = ?
                group by 1 order by 1""", [run_of(name)]).fetchall()

        # NVTX iteration markers (seeds/nsys_iteration_markers.csv) time the
        # steps as ProfilerStep ranges do, numbered from 0 as nsys-ai numbers them.
        assert steps("markers") == [
            (0, i, "gpu_projected_nvtx_marker", 150_000, 100_000, 100_000, 50_000)
            for i in (0, 1)]
        # The gap rule, where both GPUs of the export find as many iterations
        # as nsys-ai does: every kernel in one step, the steps tiling the capture.
        assert nsys_iterations("h100_2gpu_1s") == [(0, 28), (1, 28)]
        h100 = steps("h100_2gpu_1s")
        assert {(rank, rule) for rank, _i, rule, *_ in h100} == {
            (0, "gpu_projected_gap_rule"), (1, "gpu_projected_gap_rule")}
        assert [i for rank, i, *_ in h100 if rank == 0] == list(range(28))
        [(outside,)] = con.execute("""
            select count(*) from fct_kernels
            where run_id = ? and (iteration is null or is_outside_steps)""",
                                   [run_of("h100_2gpu_1s")]).fetchall()
        assert outside == 0
        # The MFU export's GPUs disagree (nsys-ai: 3 iterations on GPU 0, 1 on
        # GPU 1): no step rule, one whole-capture step per GPU.
        assert nsys_iterations("mfu_2gpu_before") == [(0, 3), (1, 1)]
        assert [(rank, rule) for rank, _i, rule, *_ in steps("mfu_2gpu_before")] == [
            (0, "gpu_whole_trace"), (1, "gpu_whole_trace")]


def test_megatron_schedule_phases_and_emit_nvtx_steps(nsys_warehouse) -> None:
    import duckdb

    root, trace_ids = nsys_warehouse
    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        phases = con.execute("""
            select phase, nvtx_depth, kernel_count, gpu_start_ns - base.base_ns, gpu_span_ns
            from fct_nsys_schedule_phases
            cross join (select min(ts_ns) - 20000 as base_ns from fct_kernels
                        where trace_id = ? and category = 'kernel') as base
            where trace_id = ? order by cpu_start_ns""",
                             [trace_ids["phases"][0], trace_ids["phases"][0]]).fetchall()
    assert phases == [("warmup", 1, 1, 20_000, 10_000), ("forward", 2, 1, 20_000, 10_000),
                      ("steady", 1, 1, 70_000, 20_000), ("backward", 2, 1, 70_000, 20_000)]
    (step,) = query_view(root, "iters", trace_ids["phases"])
    assert (step["text"], step["heuristic"], step["kernel_count"]) == (
        "ProfilerStep#7, op_id = 3", False, 2)


def test_nsys_marts_name_the_nsys_traces_they_read(nsys_warehouse) -> None:
    # The marts find the Nsight traces at run time and name them in their
    # filters (macros/per_trace.sql, loaded_traces) and their lake scans
    # read those traces' Parquet files by name (macros/lake_scan.sql), not
    # the glob over the whole lake, so on a mixed warehouse DuckDB reads
    # only those files.
    import re

    # The scans live in the intermediate models (int_kernel_short_names_extracted,
    # int_nsys_iterations_windowed); int_nsys_iterations_detected filters on them.
    root, trace_ids = nsys_warehouse
    compiled = root / "dbt/target/compiled/tracehouse/models/intermediate"
    nsys_traces = {trace_id for ids in trace_ids.values() for trace_id in ids}
    for model in ("kernels/int_kernel_short_names_extracted", "nsys/int_nsys_iterations_windowed",
                  "nsys/int_nsys_iterations_detected"):
        sql = (compiled / f"{model}.sql").read_text()
        assert set(re.findall(r"'([0-9a-f]{16})'", sql)) == nsys_traces, model
        assert "stg_lake__slices" not in sql, model
        if not model.endswith("_detected"):
            scanned = re.findall(r"/slices/run=[^/']+/([0-9a-f]{16})\.parquet'", sql)
            assert set(scanned) == nsys_traces, model
