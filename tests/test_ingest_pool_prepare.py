"""With a worker pool, a fresh lake is prepared by a worker, and is the same lake.

Why: ``ingest.runner._run_tasks`` runs :func:`ingest.lake.init_lake` in a pool
worker beside the first files' parsing, so that the coordinator never runs
Parquet's writer (its code pages were the coordinator's, and the ingest's, peak
on small multi-file sets). The lake must not change with it: the same schema
files, byte for byte, and the same trace files as an in-process ingest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.ingest import lake
from tracehouse.ingest.runner import ingest_paths

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"
_real_init_lake = lake.init_lake


def _recording_init_lake(warehouse) -> None:  # noqa: ANN001 - a Warehouse
    """init_lake, leaving the id of the process that ran it beside the warehouse."""
    (warehouse.root.parent / f"init_lake.{os.getpid()}").touch()
    _real_init_lake(warehouse)


def _schema_files(root: Path) -> dict[str, bytes]:
    found = sorted((root / "lake").glob("*/_*")) + [root / "lake" / "_lake_format"]
    return {str(p.relative_to(root)): p.read_bytes() for p in found}


def test_a_pooled_ingest_prepares_the_lake_in_a_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lake, "init_lake", _recording_init_lake)
    (tmp_path / "pooled").mkdir()
    result = ingest_paths([DLRM], tmp_path / "pooled" / "wh", jobs=2, progress=False)
    assert len(result.loaded) == 8 and not result.failed
    ran_in = [int(p.suffix[1:]) for p in (tmp_path / "pooled").glob("init_lake.*")]
    assert len(ran_in) == 1 and ran_in[0] != os.getpid()

    (tmp_path / "inline").mkdir()
    ingest_paths([DLRM], tmp_path / "inline" / "wh", jobs=1, progress=False)
    assert [int(p.suffix[1:]) for p in (tmp_path / "inline").glob("init_lake.*")] == [os.getpid()]

    pooled, inline = tmp_path / "pooled" / "wh", tmp_path / "inline" / "wh"
    assert _schema_files(pooled) == _schema_files(inline)
    assert len(_schema_files(pooled)) == 2 * len(lake.LAKE_TABLES) + 1
    data = sorted(p.relative_to(pooled) for p in (pooled / "lake").rglob("run=*/*.parquet"))
    assert data == sorted(p.relative_to(inline) for p in (inline / "lake").rglob("run=*/*.parquet"))


def test_a_lake_that_cannot_be_made_fails_the_pooled_ingest(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    (warehouse / "lake").write_text("a file where the lake's folder goes")
    with pytest.raises(OSError):
        ingest_paths([DLRM], warehouse, jobs=2, progress=False)
