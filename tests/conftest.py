"""Shared pytest fixtures: paths, and warehouses with a lake in them.

The lake fixtures write small Parquet files that conform to
``ingest/schema.py`` directly, in the layout ingest uses
(``lake/<table>/_empty.parquet`` and ``lake/<table>/run=<run>/<trace>.parquet``),
so dbt and SQL tests do not depend on the parsers and can hold exactly the
cases they check (a partially overlapping slice, a name full of quotes, a
trace interrupted mid-commit). To run them on the real ingest instead,
replace the body of :func:`build_lake` with a call to
``tracehouse.ingest.runner.ingest_paths`` and fill ``Lake.trace_ids`` from
its result; the tests only use the :class:`Lake` it returns.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracehouse.core.warehouse import ENV_VAR, Warehouse
from tracehouse.ingest.annotation_context import annotation_ranges
from tracehouse.ingest.lake import ROW_GROUP_FLAGS, write_parquet_tmp
from tracehouse.ingest.schema import LAKE_FORMAT, LAKE_TABLES, PARSED_SLICES, TRACE_TABLES
from tracehouse.ingest.slice_context import with_context

if TYPE_CHECKING:  # report_warehouse imports this module
    from report_warehouse import ReportWarehouse

#: The repository root (holds dbt_project.yml).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Real captures shared between projects; never copied into the repository.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

Rows = dict[str, list[dict[str, Any]]]

#: A name that breaks naive SQL, CSV, JSON and HTML handling.
NASTY_NAME = "void at::native::<lambda>(\"a, b\")\n'quoted' <script>alert(1)</script>"


# --------------------------------------------------------------------------- lake writing


def init_lake(warehouse: Path) -> None:
    """Create ``lake/<table>/_empty.parquet`` for every raw table, as ingest does."""
    for table, schema in LAKE_TABLES.items():
        folder = Warehouse(warehouse).table_dir(table)
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(schema.empty_table(), folder / "_empty.parquet")
    Warehouse(warehouse).lake_format_file.write_text(f"{LAKE_FORMAT}\n")


def write_rows(warehouse: Path, table: str, run_id: str, name: str, rows: Sequence[dict]) -> Path:
    """Write ``rows`` as ``lake/<table>/run=<run_id>/<name>.parquet`` with the table's schema.

    Missing keys become NULL; unknown keys are an error (the schema is the contract).
    """
    schema = LAKE_TABLES[table]
    unknown = {key for row in rows for key in row} - set(schema.names)
    if unknown:
        raise KeyError(f"columns not in the {table} schema: {sorted(unknown)}")
    folder = Warehouse(warehouse).partition_dir(table, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), path)
    return path


def write_trace(warehouse: Path, rows: Rows, *, commit: bool = True) -> None:
    """Write one trace's rows, table by table in ingest's commit order (``traces`` last).

    With ``commit=False`` the ``traces`` file is left out: the state a load
    interrupted mid-commit leaves behind.
    """
    trace = rows["traces"][0]
    for table in TRACE_TABLES:
        if table == "traces" and not commit:
            continue
        if table == "slices":
            _write_slices(warehouse, trace["run_id"], trace["trace_id"], rows)
            continue
        if table == "annotation_ranges":  # derived from the slices, as ingest does
            continue
        write_rows(warehouse, table, trace["run_id"], trace["trace_id"], rows.get(table, []))


def _write_slices(warehouse: Path, run_id: str, trace_id: str, rows: Rows) -> None:
    """The trace's slices with the context ingest adds as it writes them (slice_context),
    and the annotation ranges derived from them (annotation_context)."""
    def table(name: str, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_pylist(rows.get(name, []), schema=schema)

    slices = with_context(table("slices", PARSED_SLICES), table("flows", LAKE_TABLES["flows"]),
                          table("threads", LAKE_TABLES["threads"]))
    for name, derived in (("slices", slices), ("annotation_ranges", annotation_ranges(slices))):
        final = Warehouse(warehouse).partition_dir(name, run_id) / f"{trace_id}.parquet"
        os.replace(write_parquet_tmp(derived, final, "test", ROW_GROUP_FLAGS.get(name)), final)


def synthetic_trace(run_id: str, trace_id: str, rank: int, world_size: int = 2) -> Rows:
    """Rows of one small but realistic Kineto trace, valid against every staging test.

    A ProfilerStep with a CPU op that launches a GEMM and an NCCL all-reduce
    (with comm args), a partially overlapping slice (kept and flagged), an
    instant event, an ``ac2g`` flow, and a slice whose name holds quotes,
    commas, a newline and ``<script>``.
    """
    base = 1_700_000_000_000_000_000 + rank * 1_000  # absolute ns
    common = {"run_id": run_id, "rank": rank, "trace_id": trace_id}
    ranks = list(range(world_size))

    def piece(slice_id: int, ts: int, dur: int, name: str, **extra: Any) -> dict[str, Any]:
        row = {
            **common,
            "slice_id": slice_id,
            "ts": base + ts,
            "dur": dur,
            "phase": "X",
            "name": name,
            "is_partial_overlap": False,
            "args": json.dumps({"name": name}),
        }
        row.update(extra)
        return row

    slices = [
        piece(0, 0, 10_000, "ProfilerStep#1", category="user_annotation", track_id=0, depth=0),
        piece(
            1,
            100,
            2_000,
            "aten::mm",
            category="cpu_op",
            track_id=0,
            depth=1,
            parent_id=0,
            external_id=7,
        ),
        piece(
            2,
            200,
            300,
            "cudaLaunchKernel",
            category="cuda_runtime",
            track_id=0,
            depth=2,
            parent_id=1,
            correlation=11,
            external_id=7,
        ),
        piece(
            3,
            1_000,
            3_000,
            "ampere_sgemm_128x64_nn",
            category="kernel",
            track_id=1,
            depth=0,
            device=0,
            stream=7,
            correlation=11,
            external_id=7,
        ),
        piece(
            4,
            4_000,
            2_000,
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            category="kernel",
            track_id=2,
            depth=0,
            device=0,
            stream=20,
            collective_name="allreduce",
            process_group_name="0",
            process_group_desc="default_pg",
            process_group_ranks=ranks,
            group_size=world_size,
            in_msg_nelems=1024,
            out_msg_nelems=1024,
            dtype="Float",
        ),
        # Starts inside aten::mm (ends at 2_100) and ends after it: kept, flagged.
        piece(
            5,
            1_500,
            1_000,
            "aten::copy_",
            category="cpu_op",
            track_id=0,
            depth=2,
            parent_id=1,
            is_partial_overlap=True,
        ),
        piece(
            6,
            9_000,
            0,
            "Iteration Start: PyTorch Profiler",
            category="user_annotation",
            track_id=0,
            depth=1,
            parent_id=0,
            phase="i",
        ),
        piece(
            7, 5_000, 100, NASTY_NAME, category="user_annotation", track_id=0, depth=1, parent_id=0
        ),
    ]
    threads = [
        {
            **common,
            "track_id": 0,
            "pid": str(100 + rank),
            "tid": "100",
            "thread_name": "python",
            "is_gpu": False,
            "slice_count": 6,
        },
        {
            **common,
            "track_id": 1,
            "pid": "0",
            "tid": "stream 7",
            "thread_name": "stream 7",
            "is_gpu": True,
            "slice_count": 1,
        },
        {
            **common,
            "track_id": 2,
            "pid": "0",
            "tid": "stream 20",
            "thread_name": "stream 20",
            "is_gpu": True,
            "slice_count": 1,
        },
    ]
    processes = [
        {**common, "pid": str(100 + rank), "process_name": "python", "process_sort_index": 0},
        {
            **common,
            "pid": "0",
            "process_name": "python",
            "process_labels": "GPU 0",
            "process_sort_index": 1,
        },
    ]
    flows = [
        {
            **common,
            "flow_id": 11,
            "category": "ac2g",
            "slice_out": 2,
            "slice_in": 3,
            "ts_out": base + 200,
            "ts_in": base + 1_000,
        },
    ]
    process_groups = [
        {
            **common,
            "source": "pg_config",
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "pg_size": world_size,
            "ranks": ranks,
        },
    ]
    traces = [
        {
            **common,
            "world_size": world_size,
            "iteration": None,
            "min_profiler_step": 1,
            "max_profiler_step": 1,
            "path": f"/data/{run_id}/rank{rank}.pt.trace.json.gz",
            "file_format": "kineto_json_gz",
            "layout": "generic",
            "size_bytes": 4_096,
            "uncompressed_bytes": 65_536,
            "mtime_ns": 1_700_000_000_000_000_000,
            "content_hash": f"hash-{trace_id}",
            "engine": "native",
            "schema_version": 1,
            "base_time_ns": base,
            "trace_start_ns": base,
            "trace_end_ns": base + 10_000,
            "event_count": len(slices) + 2,
            "slice_count": len(slices),
            "flow_count": len(flows),
            "unpaired_flow_events": 0,
            "partial_overlap_count": 1,
            "backend": "nccl",
            "distributed_info": json.dumps(
                {"backend": "nccl", "rank": rank, "world_size": world_size}
            ),
            "device_properties": "[]",
            "has_op_shapes": False,  # no cpu_op carries Input Dims
            "ingested_at": datetime(2024, 1, 1, tzinfo=timezone.utc),
            "lake_format": LAKE_FORMAT,
        }
    ]
    return {
        "slices": slices,
        "flows": flows,
        "threads": threads,
        "processes": processes,
        "process_groups": process_groups,
        "traces": traces,
    }


@dataclass
class Lake:
    """A warehouse whose lake was filled by :func:`build_lake`."""

    warehouse: Path
    run_id: str
    trace_ids: list[str] = field(default_factory=list)

    def row_count(self, table: str) -> int:
        """Rows of ``table`` in the lake of committed traces, read straight from Parquet."""
        import duckdb

        glob = str(Warehouse(self.warehouse).table_dir(table) / "**" / "*.parquet")
        con = duckdb.connect()
        try:
            query = (
                "select count(*) from read_parquet(?, union_by_name = true,"
                " hive_partitioning = false)"
            )
            params: list[Any] = [glob]
            if table in TRACE_TABLES:
                query += " where list_contains(?, trace_id)"
                params.append(self.trace_ids)
            return con.execute(query, params).fetchone()[0]
        finally:
            con.close()


def query_warehouse(warehouse: Path, sql: str,
                    params: Sequence[Any] | Mapping[str, Any] | None = None) -> list[tuple]:
    """Rows of ``sql`` on the warehouse's published database, opened read-only.

    The one helper for tests that read a built warehouse (bound parameters,
    positional or named, connection closed after), as ``tracehouse sql``
    would read it.
    """
    import duckdb

    bound = dict(params) if isinstance(params, Mapping) else list(params or [])
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        return con.execute(sql, bound).fetchall()
    finally:
        con.close()


def build_lake(warehouse: Path, run_id: str = "run_a", ranks: int = 2) -> Lake:
    """Fill the lake of ``warehouse`` with ``ranks`` committed synthetic traces.

    The one place to switch the dbt/SQL tests to the real ingest.
    """
    init_lake(warehouse)
    lake = Lake(warehouse=warehouse, run_id=run_id)
    for rank in range(ranks):
        trace_id = f"{run_id}-rank{rank}"
        write_trace(warehouse, synthetic_trace(run_id, trace_id, rank, world_size=ranks))
        lake.trace_ids.append(trace_id)
    return lake


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _no_ambient_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's ``$TRACEHOUSE_WAREHOUSE`` out of the tests."""
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def warehouse_dir(tmp_path: Path) -> Path:
    """An empty warehouse folder (nothing ingested)."""
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture
def make_lake(tmp_path: Path) -> Callable[..., Lake]:
    """Factory: ``make_lake(run_id="run_a", ranks=2)`` fills a fresh warehouse's lake."""
    counter = iter(range(1_000_000))

    def make(run_id: str = "run_a", ranks: int = 2) -> Lake:
        return build_lake(tmp_path / f"warehouse{next(counter)}", run_id=run_id, ranks=ranks)

    return make


# --------------------------------------------------------------------------- shared warehouses
#
# A real ingest plus a dbt build is most of the slow set's time, and many
# modules read the same built state. Those warehouses are built here once per
# session, on first use (the fast set never asks for one), and shared
# read-only: a test that writes (a build, an ingest, other vars) works on
# copy_warehouse() of one, and the session fails at its end when a file of a
# shared warehouse changed, naming the file, so no test can make another
# depend on the order they ran in.


def warehouse_fingerprint(root: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime_ns) of every file under ``root``."""
    files = (path for path in root.rglob("*") if path.is_file())
    return {str(path.relative_to(root)): (stat.st_size, stat.st_mtime_ns)
            for path in files for stat in [path.stat()]}


def copy_warehouse(source: Path, target: Path) -> Path:
    """A private copy of a built warehouse (database, lake, dbt state) at ``target``.

    For a test that must write into a shared warehouse: copying a few files
    costs a fraction of a second, a rebuild tens of seconds.
    """
    shutil.copytree(source, target, symlinks=True)
    return target


@contextmanager
def shared_read_only(root: Path) -> Iterator[Path]:
    """Hold ``root`` for the session's readers; at the end fail, naming the files,
    if anything in it changed."""
    before = warehouse_fingerprint(root)
    yield root
    after = warehouse_fingerprint(root)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name))
    if changed:
        pytest.fail(f"a test wrote into the shared warehouse {root}: {changed[:10]}; "
                    "tests that write must work on copy_warehouse() of it", pytrace=False)


@pytest.fixture(scope="session")
def built_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """The synthetic lake (:func:`build_lake`) after a passing ``dbt build``, once per
    session; read-only (see :func:`shared_read_only`)."""
    from tracehouse.build.dbt import build_warehouse

    lake = build_lake(tmp_path_factory.mktemp("synthetic") / "warehouse")
    build_warehouse(lake.warehouse)
    with shared_read_only(lake.warehouse):
        yield lake


#: The real runs of the shared reference warehouse, each under its own name:
#: run -> its traces under ``SHARED_DATA``. Readers filter by ``run_id``.
REFERENCE_RUNS = {
    "dlrm_8rank": Path("kineto/dlrm_8rank"),
    "tp2_pp2_dp2": Path("kineto/megatron_cpu/tp2_pp2_dp2"),
    "tp1_pp4_dp2": Path("kineto/megatron_cpu/tp1_pp4_dp2"),
    "tp2_pp2_dp1_vpp2": Path("kineto/megatron_cpu/tp2_pp2_dp1_vpp2"),
    "a100_nccl_pg_args": Path("kineto/single_rank/a100_nccl_pg_args.json.gz"),
    "sampled_128rank_job_rank-0": Path("kineto/single_rank/sampled_128rank_job_rank-0.json.gz"),
    "sampled_128rank_job_rank-1": Path("kineto/single_rank/sampled_128rank_job_rank-1.json.gz"),
}
#: GPU captures vendored in the repo (tests/data/captured/README.md): run -> folder.
CAPTURED_DATA = REPO_ROOT / "tests" / "data" / "captured"
REFERENCE_CAPTURES = {
    "h200_gpt_step": CAPTURED_DATA / "h200_gpt_step",
    "h200_gpt_step_fused_adamw": CAPTURED_DATA / "h200_gpt_step_fused_adamw",
    "h200_megatron_tp1": CAPTURED_DATA / "h200_megatron_tp1",
}
#: Its simulated runs: run -> (SimConfig arguments, the subfolder ingested or "").
REFERENCE_SIMULATIONS: dict[str, tuple[dict[str, Any], str]] = {
    # test_models_distributed: rank 5 slowed 1.5x, 200 us of clock skew between nodes.
    "sim_straggler_skew": (dict(layers=4, hidden=256, heads=8, seq_length=256, vocab=1024,
                                tp=2, pp=2, dp=2, microbatches=4, iterations=2, gpus_per_node=2,
                                stragglers=((5, 1.5),), clock_skew_us=200.0), ""),
    # test_models_idle: ns timestamps on many streams; the one iteration's folder,
    # which HTA reads as one trace per rank.
    "simulated": (dict(tp=2, pp=2, dp=1, microbatches=4, iterations=1, layers=4, hidden=1024,
                       heads=16, seq_length=1024, vocab=1024, gpus_per_node=4), "iteration_1"),
    # test_reports_time_axis: an interleaved schedule, and a plain 1F1B one.
    "sim_tp2_pp2_dp2_vpp2": (dict(tp=2, pp=2, dp=2, vpp=2, schedule="interleaved",
                                  microbatches=4, iterations=1, layers=4, hidden=512, heads=8,
                                  seq_length=512, vocab=8000, seed=0), ""),
    "sim_tp1_pp2_1f1b": (dict(tp=1, pp=2, dp=1, schedule="1f1b", microbatches=4, iterations=1,
                              layers=4, hidden=512, heads=8, seq_length=512, vocab=8000,
                              seed=1), ""),
    # test_models_efficiency: recorded with shapes, interleaved over two stages, rank 2
    # (stage 1) slowed 1.5x; GEMMs big enough to run above the cost model's 2 us floor.
    "sim_shapes_tp2_pp2_vpp2": (dict(tp=2, pp=2, dp=1, vpp=2, schedule="interleaved",
                                     microbatches=4, iterations=2, layers=4, hidden=2048,
                                     heads=16, seq_length=2048, vocab=8000,
                                     stragglers=((2, 1.5),), record_shapes=True, seed=2), ""),
}


@dataclass(frozen=True)
class ReferenceWarehouse:
    """The shared reference warehouse: where it is, what each run was ingested from,
    and each simulated run's ground truth."""

    root: Path
    sources: dict[str, Path]
    truths: dict[str, dict]


@pytest.fixture(scope="session")
def reference_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceWarehouse]:
    """dlrm_8rank, the three megatron_cpu runs, the single-rank GPU traces, the
    vendored H200 captures and the simulated runs: each ingested under its own
    name and built by one plain ``tracehouse build`` (the data tests of the
    marts), once per session; read-only."""
    sources = {run: SHARED_DATA / path for run, path in REFERENCE_RUNS.items()}
    missing = [str(path) for path in sources.values() if not path.exists()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import SimConfig, simulate_run

    sources.update(REFERENCE_CAPTURES)
    base = tmp_path_factory.mktemp("reference")
    truths = {}
    for run, (config, folder) in REFERENCE_SIMULATIONS.items():
        simulated = simulate_run(SimConfig(**config), base / run, jobs=1)
        sources[run] = simulated.out_dir / folder
        truths[run] = simulated.ground_truth
    root = base / "warehouse"
    for run, path in sources.items():
        result = ingest_paths([path], warehouse=root, run=run, progress=False)
        assert not result.failed, result.failed
    build_warehouse(root)
    with shared_read_only(root):
        yield ReferenceWarehouse(root=root, sources=sources, truths=truths)


@pytest.fixture(scope="session")
def report_wh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportWarehouse]:
    """The report tests' warehouse (tests/report_warehouse.py: simulated, hostile,
    CPU-only and real runs), built once per session; read-only."""
    from report_warehouse import build_report_warehouse

    built = build_report_warehouse(tmp_path_factory.mktemp("report_warehouse"))
    with shared_read_only(built.root):
        yield built


@pytest.fixture(scope="session")
def report_viewer(report_wh: ReportWarehouse) -> Iterator[Any]:
    """``tracehouse serve`` over the report tests' warehouse (tests/viewer.py), in a thread,
    once per session; it only reads."""
    from viewer import serving

    with serving(report_wh.root) as server:
        yield server


@pytest.fixture(scope="session")
def whatif_wh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Simulated runs with known injected causes built with the what-if models
    (tests/whatif_warehouse.py), once per session; read-only."""
    from whatif_warehouse import build_whatif_warehouse

    built = build_whatif_warehouse(tmp_path_factory.mktemp("whatif_warehouse"))
    with shared_read_only(built.root):
        yield built
