"""``tracehouse demo`` runs end to end: simulate → ingest → dbt build → headline numbers."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tracehouse.cli import main


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs" / "demo_run"
    warehouse = tmp_path / "warehouse"
    assert main(["demo", "--out", str(run_dir), "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert "4/4 rendering the report" in out
    index = warehouse / "reports" / "demo_run" / "index.html"
    assert f"report: {index}" in out
    assert index.is_file() and "<img" in index.read_text()
    assert "rank 5 computes" in out  # the injected straggler is the slowest
    assert str(warehouse) in out
    assert (run_dir / "ground_truth.json").is_file()
    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    try:
        traces, ranks = con.execute(
            "select count(*), count(distinct rank) from stg_lake__traces where run_id = ?",
            ["demo_run"]).fetchone()
    finally:
        con.close()
    assert (traces, ranks) == (32, 16)
