"""``tracehouse export perfetto|table`` and ``tracehouse report`` from the command line.

The library functions have their own tests; these check the thin CLI layer:
arguments reach them, results land where ``--out`` says, and exit codes
follow the contract (0 done, 2 usage error such as an unknown run or table).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import Lake
from tracehouse.cli.arguments import rank_list
from tracehouse.cli.main import main

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


def test_rank_list_parses_ranges() -> None:
    assert rank_list("0,1,4-7") == [0, 1, 4, 5, 6, 7]
    assert rank_list("3, 3,2") == [2, 3]
    with pytest.raises(Exception, match="not a rank list"):
        rank_list("5-2")


def test_export_table_writes_csv(built_warehouse: Lake, tmp_path: Path) -> None:
    out = tmp_path / "kernels.csv"
    code = main(["export", "table", "fct_kernels", "--run", built_warehouse.run_id,
                 "--out", str(out), "--warehouse", str(built_warehouse.warehouse)])
    assert code == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and {row["run_id"] for row in rows} == {built_warehouse.run_id}


def test_export_unknown_table_or_run_is_a_usage_error(built_warehouse: Lake,
                                                      tmp_path: Path) -> None:
    wh = str(built_warehouse.warehouse)
    assert main(["export", "table", "no_such_table", "--out", str(tmp_path / "x.csv"),
                 "--warehouse", wh]) == 2
    assert main(["export", "perfetto", "--run", "no_such_run", "--out",
                 str(tmp_path / "x.pftrace"), "--warehouse", wh]) == 2
    assert not (tmp_path / "x.pftrace").exists()


def test_export_table_unknown_run_lists_the_runs(built_warehouse: Lake, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--run nope`` used to write a header-only file and exit 0."""
    out = tmp_path / "k.csv"
    assert main(["export", "table", "fct_kernels", "--run", "nope", "--out", str(out),
                 "--warehouse", str(built_warehouse.warehouse)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "no run 'nope'" in err and built_warehouse.run_id in err


def test_export_perfetto_selected_ranks(built_warehouse: Lake, tmp_path: Path) -> None:
    out = tmp_path / "two.pftrace"
    code = main(["export", "perfetto", "--run", built_warehouse.run_id, "--ranks", "0-1",
                 "--out", str(out), "--warehouse", str(built_warehouse.warehouse)])
    assert code == 0
    assert out.stat().st_size > 0


def test_report_unknown_run_is_a_usage_error(built_warehouse: Lake, tmp_path: Path) -> None:
    assert main(["report", "--run", "no_such_run", "--out", str(tmp_path / "r"),
                 "--warehouse", str(built_warehouse.warehouse)]) == 2
