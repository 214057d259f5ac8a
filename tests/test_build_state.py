"""tracehouse.build_state: when a plain build may skip, narrow, or must build everything."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tracehouse.build_state import (
    changed_lake_tables,
    fingerprint,
    read_state,
    write_state,
)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "models").mkdir(parents=True)
    (root / "models" / "a.sql").write_text("select 1")
    (root / "dbt_project.yml").write_text("name: p\n")
    return root


@pytest.fixture()
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "warehouse" / "lake"
    for table in ("traces", "slices"):
        (root / table / "run=r").mkdir(parents=True)
        (root / table / "run=r" / "t1.parquet").write_bytes(b"x")
    return root


def _touch(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_only_the_tables_whose_files_changed_are_named(project: Path, lake: Path) -> None:
    before = fingerprint(project, lake, ["build"], location=lake.parent)
    _touch(lake / "slices" / "run=r" / "t2.parquet", b"yy")
    (lake / "ingest_errors").mkdir()
    (lake / "ingest_errors" / "e.parquet").write_bytes(b"e")
    after = fingerprint(project, lake, ["build"], location=lake.parent)
    assert after.lake != before.lake
    assert changed_lake_tables(before, after) == ["ingest_errors", "slices"]
    assert changed_lake_tables(after, after) == []


def test_a_removed_table_counts_as_changed(project: Path, lake: Path) -> None:
    before = fingerprint(project, lake, ["build"], location=lake.parent)
    (lake / "slices" / "run=r" / "t1.parquet").unlink()
    after = fingerprint(project, lake, ["build"], location=lake.parent)
    assert changed_lake_tables(before, after) == ["slices"]


@pytest.mark.parametrize("what", ["project", "args", "location", "unrecorded", "none"])
def test_no_narrowing_without_a_comparable_last_build(
    what: str, project: Path, lake: Path, tmp_path: Path
) -> None:
    """Narrowing is only right when the last build ran the same command with the
    same code in the same folder, and recorded its tables."""
    now = fingerprint(project, lake, ["build"], location=lake.parent)
    last = {
        "project": replace(now, project="other"),
        "args": fingerprint(project, lake, ["build", "-s", "x"], location=lake.parent),
        "location": fingerprint(project, lake, ["build"], location=tmp_path),
        "unrecorded": replace(now, lake_tables=()),
        "none": None,
    }[what]
    assert changed_lake_tables(last, now) is None


def test_state_round_trips_and_old_records_read_as_unrecorded(
    project: Path, lake: Path, tmp_path: Path
) -> None:
    state = fingerprint(project, lake, ["build"], location=lake.parent)
    write_state(tmp_path / "artifacts", state)
    assert read_state(tmp_path / "artifacts") == state
    # A record written before tables were fingerprinted: readable, never narrowed.
    (tmp_path / "artifacts" / "build_state.json").write_text(
        '{"project": "p", "lake": "l", "args": "a"}'
    )
    old = read_state(tmp_path / "artifacts")
    assert old is not None and changed_lake_tables(old, state) is None
