"""Commands that read the last build say when the lake holds traces it has not seen
(issue 29 item 11): ``tracehouse sql``, ``report``, ``export`` and ``compare``.

A run that is only in the lake is not "unknown": the error says it is not built
yet and which command builds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Lake, copy_warehouse, synthetic_trace, write_trace
from tracehouse.build.dbt import build_warehouse
from tracehouse.build.freshness import lake_traces, unbuilt_traces
from tracehouse.cli import main
from tracehouse.core.warehouse import Warehouse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stale(built_warehouse: Lake, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """A built warehouse (a copy of the session's synthetic one), then one more trace
    of its run and a new run's trace in the lake (ingested, not built), and a trace
    interrupted mid-commit."""
    root = copy_warehouse(built_warehouse.warehouse, tmp_path_factory.mktemp("fresh") / "wh")
    lake = Lake(warehouse=root, run_id=built_warehouse.run_id,
                trace_ids=list(built_warehouse.trace_ids))
    write_trace(lake.warehouse, synthetic_trace(lake.run_id, "run_a-rank2", 2))
    write_trace(lake.warehouse, synthetic_trace("mixed", "mixed-rank0", 0))
    write_trace(lake.warehouse, synthetic_trace("mixed", "half", 1), commit=False)
    return lake


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def test_the_lake_listing_holds_committed_traces_only(stale: Lake) -> None:
    assert lake_traces(Warehouse(stale.warehouse)) == {
        "run_a": {"run_a-rank0", "run_a-rank1", "run_a-rank2"}, "mixed": {"mixed-rank0"}}
    unbuilt = unbuilt_traces(Warehouse(stale.warehouse))
    assert unbuilt is not None and unbuilt.traces_by_run == {"run_a": 1, "mixed": 1}
    assert unbuilt.only_in_lake("mixed") and not unbuilt.only_in_lake("run_a")


def test_sql_says_the_lake_has_traces_the_build_has_not_seen(
        stale: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(stale.warehouse)
    assert main(["sql", "select 1 as one", "--warehouse", wh, "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "one\n1\n"
    assert (f"note: the lake has 2 trace(s) newer than the last build (runs: mixed, run_a); "
            f"run tracehouse build --warehouse {stale.warehouse}") in captured.err


@pytest.mark.parametrize("command", [
    ["report", "--run", "mixed"],
    ["export", "table", "fct_kernels", "--run", "mixed", "--out", "OUT/k.csv"],
    ["export", "perfetto", "--run", "mixed", "--out", "OUT/t.json", "--format", "json"],
    ["compare", "run_a", "mixed"],
], ids=lambda argv: " ".join(argv[:2]))
def test_a_run_only_in_the_lake_is_not_unknown_but_unbuilt(
        stale: Lake, command: list[str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [arg.replace("OUT", str(tmp_path)) for arg in command]
    assert main([*argv, "--warehouse", str(stale.warehouse)]) == 2
    err = _err(capsys)
    assert ("error: run 'mixed' is in the lake but not in the last build (1 trace(s) newer "
            f"than the last build); run tracehouse build --warehouse {stale.warehouse}") in err
    assert "unknown run" not in err and "not in the warehouse" not in err
    assert not list(tmp_path.iterdir())


def test_export_of_a_built_run_works_and_says_what_is_newer(
        stale: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k.csv"
    assert main(["export", "table", "fct_kernels", "--run", "run_a", "--out", str(out),
                 "--warehouse", str(stale.warehouse)]) == 0
    assert out.is_file()
    assert "note: the lake has 2 trace(s) newer than the last build" in _err(capsys)


def test_after_a_build_nothing_is_said(
        built_warehouse: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = copy_warehouse(built_warehouse.warehouse, tmp_path / "wh")
    capsys.readouterr()
    assert main(["sql", "select 1", "--warehouse", str(warehouse)]) == 0
    assert "newer than the last build" not in _err(capsys)
    write_trace(warehouse, synthetic_trace("later", "later-rank0", 0))
    assert main(["sql", "select 1", "--warehouse", str(warehouse)]) == 0
    assert "(runs: later)" in _err(capsys)
    build_warehouse(warehouse)
    capsys.readouterr()
    assert main(["sql", "select 1", "--warehouse", str(warehouse)]) == 0
    assert "newer than the last build" not in _err(capsys)
