"""dbt staging layer: real dbt builds on real DuckDB over a small lake.

One warehouse is built per module (each dbt invocation costs seconds); tests
read it and never change it. Tests that need another lake build their own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import (
    SHARED_DATA,
    Lake,
    build_lake,
    init_lake,
    query_warehouse,
    synthetic_trace,
    write_rows,
    write_trace,
)
from tracehouse.build.dbt import DBT_ARTIFACTS_DIR, EXIT_FAILED, EXIT_OK, EXIT_USAGE, run_dbt
from tracehouse.core.warehouse import ENV_VAR, Warehouse
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES

pytestmark = pytest.mark.slow

#: Staging view of each lake table.
STAGING = {table: f"stg_lake__{table}" for table in LAKE_TABLES}

UNCOMMITTED_TRACE = "run_a-rank9-uncommitted"


def _run_results(warehouse: Path) -> list[dict]:
    path = warehouse / DBT_ARTIFACTS_DIR / "target" / "run_results.json"
    return json.loads(path.read_text())["results"]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """Two committed ranks plus one trace interrupted mid-commit, built once.

    The folder name holds a space, a quote and braces: the staging views'
    lake paths (macro lake_source) must escape them for SQL.
    """
    root = tmp_path_factory.mktemp("staging") / "ware house 'q' {x}"
    lake = build_lake(root)
    rows = synthetic_trace("run_a", UNCOMMITTED_TRACE, rank=9)
    write_trace(root, rows, commit=False)
    # Not a plain build: a plain `tracehouse build` leaves out the lake's own
    # invariants (tag `lake`), which this module is here to check.
    assert run_dbt(["build", "--exclude-resource-type", "unit_test"], root) == EXIT_OK
    yield lake


def test_build_runs_every_model_and_test(warehouse: Lake) -> None:
    results = _run_results(warehouse.warehouse)
    statuses = {result["unique_id"]: result["status"] for result in results}
    bad = {uid: status for uid, status in statuses.items() if status not in {"pass", "success"}}
    assert not bad
    models = {uid for uid in statuses if uid.startswith("model.")}
    # Later layers (intermediate, marts) build too; every staging view is there.
    assert {f"model.tracehouse.{name}" for name in STAGING.values()} <= models
    lake_tests = [uid for uid in statuses if uid.startswith("test.") and "stg_lake__" in uid]
    assert len(lake_tests) >= 30


def test_environment_is_restored_after_a_run(warehouse: Lake) -> None:
    assert ENV_VAR not in os.environ


@pytest.mark.parametrize("table", sorted(LAKE_TABLES))
def test_staging_rows_equal_committed_lake_rows(warehouse: Lake, table: str) -> None:
    [(count,)] = query_warehouse(warehouse.warehouse, f"select count(*) from {STAGING[table]}")
    assert count == warehouse.row_count(table)
    if table in TRACE_TABLES:  # the lake fixture writes no errors or topology files
        assert count > 0


def test_partially_committed_trace_is_invisible(warehouse: Lake) -> None:
    """Rows of a trace without its traces file exist in the lake but in no staging view."""
    lake_glob = str(Warehouse(warehouse.warehouse).table_dir("slices") / "**" / "*.parquet")
    raw = duckdb.execute(
        "select count(*) from read_parquet(?, union_by_name = true, hive_partitioning = false)"
        " where trace_id = ?",
        [lake_glob, UNCOMMITTED_TRACE],
    ).fetchone()[0]
    assert raw > 0
    for table, view in STAGING.items():
        if table not in TRACE_TABLES:  # ingest_errors, topology_groups: no trace_id
            continue
        rows = query_warehouse(
            warehouse.warehouse,
            f"select count(*) from {view} where trace_id = ?",
            [UNCOMMITTED_TRACE],
        )
        assert rows == [(0,)], view


def test_slices_times_are_renamed_to_ns_with_end(warehouse: Lake) -> None:
    columns = {
        row[0]
        for row in query_warehouse(
            warehouse.warehouse,
            "select column_name from information_schema.columns"
            " where table_name = 'stg_lake__slices'",
        )
    }
    assert {"ts_ns", "dur_ns", "end_ns"} <= columns
    assert not {"ts", "dur"} & columns
    mismatched = query_warehouse(
        warehouse.warehouse,
        "select count(*) from stg_lake__slices where end_ns != ts_ns + dur_ns",
    )
    assert mismatched == [(0,)]
    flows = query_warehouse(
        warehouse.warehouse,
        "select column_name from information_schema.columns where table_name = 'stg_lake__flows'",
    )
    assert {"ts_out_ns", "ts_in_ns"} <= {row[0] for row in flows}


def test_partial_overlap_slices_are_kept_and_flagged(warehouse: Lake) -> None:
    rows = query_warehouse(
        warehouse.warehouse,
        "select trace_id, count(*) from stg_lake__slices where is_partial_overlap"
        " group by trace_id order by trace_id",
    )
    assert rows == [(trace_id, 1) for trace_id in sorted(warehouse.trace_ids)]


def test_views_read_the_lake_by_absolute_path(
    warehouse: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The views work from any working directory (run_dbt passes an absolute path)."""
    monkeypatch.chdir(tmp_path)
    assert query_warehouse(warehouse.warehouse, "select count(*) from stg_lake__traces") == [(2,)]


def test_tests_catch_broken_lake_rows(tmp_path: Path) -> None:
    """The generic tests are not vacuous: duplicates, orphans and negative durations fail."""
    root = tmp_path / "broken"
    build_lake(root, ranks=1)
    trace = synthetic_trace("run_a", "run_a-rank0", rank=0)
    bad_slices = [
        *trace["slices"],
        {**trace["slices"][1], "dur": -5},  # duplicate key and negative duration
        {**trace["slices"][2], "slice_id": 99, "parent_id": 1234},  # orphan parent
    ]
    write_rows(root, "slices", "run_a", "run_a-rank0", bad_slices)
    bad_flows = [{**trace["flows"][0], "slice_in": 4321}]  # flow into no slice
    write_rows(root, "flows", "run_a", "run_a-rank0", bad_flows)

    # The lake's own invariants (tag `lake`) are left out of a plain build: ask for them.
    assert run_dbt(["build", "--exclude-resource-type", "unit_test"], root) == EXIT_FAILED

    failed = {r["unique_id"].split(".")[2] for r in _run_results(root) if r["status"] == "fail"}
    assert failed == {
        "unique_combination_stg_lake__slices_trace_id__slice_id",
        "expression_is_true_stg_lake__slices_dur_ns___0",
        "stg_lake__slices_parent_in_same_trace",
        "stg_lake__flows_slice_in_in_same_trace",
    }


def test_empty_warehouse_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "fresh"
    init_lake(root)  # initialised, nothing ingested
    assert run_dbt([], root) == EXIT_FAILED
    err = capsys.readouterr().err
    assert str(root) in err
    assert "tracehouse ingest PATH" in err
    assert not Warehouse(root).database.exists()


def test_missing_warehouse_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "nowhere"
    assert run_dbt(["build", "--select", "staging"], root) == EXIT_FAILED
    assert "tracehouse ingest PATH" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["frobnicate"], ["build", "--no-such-option"]])
def test_usage_errors_return_2(
    args: list[str], warehouse_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_lake(warehouse_dir, ranks=1)
    assert run_dbt(args, warehouse_dir) == EXIT_USAGE
    assert "error:" in capsys.readouterr().err


def test_real_ingest_staging_counts_equal_lake(tmp_path: Path) -> None:
    """With the real ingest: an 8-rank DLRM job lands whole in the staging views."""
    runner = pytest.importorskip("tracehouse.ingest.runner")
    data = SHARED_DATA / "kineto" / "dlrm_8rank"
    if not data.is_dir():
        pytest.skip(f"shared test data not found at {data}")
    root = tmp_path / "dlrm"
    runner.ingest_paths([data], root, run="dlrm")
    assert run_dbt(["build"], root) == EXIT_OK

    trace_ids = [row[0] for row in query_warehouse(root, "select trace_id from stg_lake__traces")]
    assert len(trace_ids) == 8
    lake = Lake(warehouse=root, run_id="dlrm", trace_ids=trace_ids)
    for table, view in STAGING.items():
        [(count,)] = query_warehouse(root, f"select count(*) from {view}")
        assert count == lake.row_count(table), table
    [(slices,)] = query_warehouse(root, "select count(*) from stg_lake__slices")
    assert slices > 8 * 1_000
