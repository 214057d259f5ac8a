"""`tracehouse nsys … --warehouse W` on a file W already holds: no second run, no rebuild.

A user who ingested an export (`tracehouse ingest`) and then asks for a view
of it must get the run they loaded, not a copy under `nsys-<name>`; asking
again, with nothing changed, must neither ingest nor build. A GPU the file
does not have is a usage error naming the GPUs it has.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from nsys_export import write_two_step_export
from tracehouse.cli import main

pytestmark = pytest.mark.slow


def _runs(root: Path) -> list[tuple[str, str]]:
    glob = str(root / "lake" / "traces" / "**" / "*.parquet")
    with duckdb.connect() as con:
        return con.execute("select distinct run_id, path from read_parquet(?) order by 1, 2",
                           [glob]).fetchall()


@pytest.fixture
def dbt_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every dbt invocation, still run for real."""
    import tracehouse.build.dbt as dbt

    calls: list[list[str]] = []
    real = dbt.run_dbt

    def counting(args, warehouse=None):  # noqa: ANN001, ANN202 - the signature of run_dbt
        calls.append(list(args))
        return real(args, warehouse)

    monkeypatch.setattr(dbt, "run_dbt", counting)
    return calls


def test_a_file_in_the_warehouse_is_reused_and_not_rebuilt(
    tmp_path: Path, dbt_calls: list, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    export = write_two_step_export(job / "steps.sqlite")
    root = tmp_path / "wh"
    assert main(["ingest", str(export), "--warehouse", str(root), "-q"]) == 0
    assert _runs(root) == [("job", str(export.resolve()))]

    assert main(["nsys", "overlap", str(export), "--warehouse", str(root),
                 "--format", "json"]) == 0
    captured = capsys.readouterr()
    first = json.loads(captured.out)
    # Issue 29 item 13: the build (seconds, dbt quiet) is announced on stderr.
    assert f"building the marts for the Nsight views in {root}" in captured.err
    assert _runs(root) == [("job", str(export.resolve()))]  # no run `nsys-steps`
    # Only what `overlap` reads is built (nsys_views/load.py VIEW_MARTS): not the NVTX tree,
    # the costliest models on a large export.
    import duckdb

    with duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True) as con:
        built = {name for (name,) in con.execute(
            "select table_name from information_schema.tables").fetchall()}
    assert {"fct_kernels", "fct_nsys_gpu_overlap"} <= built
    assert "fct_annotation_ranges" not in built and "fct_nsys_iterations" not in built
    # Nor the step chain under fct_rank_iterations, which the views never read.
    assert not built & {"fct_rank_iterations", "int_rank_steps_swept", "dim_ranks"}
    assert len(dbt_calls) == 1
    assert [row["span_ms"] for row in first] == [1.15]

    lake_files = sorted((p, p.stat().st_mtime_ns) for p in (root / "lake").rglob("*"))
    database = (root / "tracehouse.duckdb").stat().st_mtime_ns
    assert main(["nsys", "overlap", str(export), "--warehouse", str(root),
                 "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == first
    assert "building" not in captured.err
    assert len(dbt_calls) == 1, "nothing changed, yet the marts were built again"
    assert sorted((p, p.stat().st_mtime_ns) for p in (root / "lake").rglob("*")) == lake_files
    assert (root / "tracehouse.duckdb").stat().st_mtime_ns == database

    # A copy elsewhere (same bytes) is the same trace: shown, not loaded again.
    copy = tmp_path / "elsewhere" / "renamed.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(export, copy)
    assert main(["nsys", "overlap", str(copy), "--warehouse", str(root),
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert _runs(root) == [("job", str(export.resolve()))]
    assert len(dbt_calls) == 1

    # The file changed: reloaded in its run (replacing the old version), built again.
    with sqlite3.connect(export) as con:
        con.execute("delete from CUPTI_ACTIVITY_KIND_KERNEL where start > 1500000")
    os.utime(export, ns=(1, 1))
    assert main(["nsys", "overlap", str(export), "--warehouse", str(root),
                 "--format", "json"]) == 0
    changed = json.loads(capsys.readouterr().out)
    assert _runs(root) == [("job", str(export.resolve()))]
    assert len(dbt_calls) == 2 and changed != first


def test_help_names_the_real_default_warehouse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nsys", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "default: a temporary warehouse" in out
    assert "./warehouse" not in out


@pytest.mark.skipif(not (SHARED_DATA / "nsys").is_dir(), reason="shared data missing")
def test_a_gpu_the_file_lacks_is_a_usage_error(
    tmp_path: Path, dbt_calls: list, capsys: pytest.CaptureFixture[str]
) -> None:
    export = SHARED_DATA / "nsys" / "h100_2gpu_1s.sqlite"
    assert main(["nsys", "summary", str(export), "--gpu", "7"]) == 2
    assert "no GPU 7 (GPUs: 0, 1)" in capsys.readouterr().err
    assert dbt_calls == []  # refused before building anything
