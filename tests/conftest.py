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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracehouse.ingest.schema import LAKE_FORMAT, LAKE_TABLES, PARSED_SLICES, TRACE_TABLES
from tracehouse.ingest.slice_context import with_context
from tracehouse.warehouse import ENV_VAR, Warehouse

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
        write_rows(warehouse, table, trace["run_id"], trace["trace_id"], rows.get(table, []))


def _write_slices(warehouse: Path, run_id: str, trace_id: str, rows: Rows) -> None:
    """The trace's slices with the context ingest adds as it writes them (slice_context)."""
    def table(name: str, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_pylist(rows.get(name, []), schema=schema)

    slices = with_context(table("slices", PARSED_SLICES), table("flows", LAKE_TABLES["flows"]),
                          table("threads", LAKE_TABLES["threads"]))
    folder = Warehouse(warehouse).partition_dir("slices", run_id)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(slices, folder / f"{trace_id}.parquet")


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


def query_warehouse(warehouse: Path, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Rows of ``sql`` on the warehouse's published database, opened read-only.

    The one helper for tests that read a built warehouse (bound parameters,
    connection closed after), as ``tracehouse sql`` would read it.
    """
    import duckdb

    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        return con.execute(sql, list(params or [])).fetchall()
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


def ingest_and_build(sets: dict[str, Path], root: Path) -> Path:
    """Ingest each shared trace set as its own run into ``root`` and build it.

    Skips the calling test when a set is not on this machine (shared data).
    """
    from tracehouse.dbt import EXIT_OK, run_dbt
    from tracehouse.ingest.runner import ingest_paths

    missing = [str(p) for p in sets.values() if not p.exists()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    for run, path in sets.items():
        result = ingest_paths([path], warehouse=root, run=run, progress=False)
        assert not result.failed, result.failed
    assert run_dbt(["build"], root) == EXIT_OK
    return root


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


@pytest.fixture(scope="module")
def module_lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """A lake shared by the tests of one module (build it once; do not modify it)."""
    return build_lake(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="module")
def built_warehouse(module_lake: Lake) -> Iterator[Lake]:
    """The module's lake after a passing ``dbt build`` (one dbt run per module)."""
    from tracehouse.dbt import build_warehouse

    build_warehouse(module_lake.warehouse)
    yield module_lake
