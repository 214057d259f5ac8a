"""tracehouse.build.state: when a plain build may skip, narrow, or must build everything."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tracehouse.build.state import (
    BuildFingerprint,
    args_fingerprint,
    build_arguments,
    changed_lake_tables,
    fingerprint,
    read_state,
    why_not_narrowed,
    write_state,
)

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


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
    assert changed_lake_tables(_last_build(what, now, project, lake, tmp_path), now) is None


def _last_build(what: str, now: BuildFingerprint, project: Path, lake: Path,
                tmp_path: Path) -> BuildFingerprint | None:
    """A last build that differs from ``now`` in ``what``."""
    return {
        "project": replace(now, project="other"),
        "args": fingerprint(project, lake, ["build", "-s", "x"], location=lake.parent),
        "location": fingerprint(project, lake, ["build"], location=tmp_path),
        "unrecorded": replace(now, lake_tables=()),
        "none": None,
    }[what]


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


def test_options_that_change_only_the_output_leave_a_build_the_same(
    project: Path, lake: Path
) -> None:
    """Issue 29 item 10: the demo builds with ``--quiet``; the next plain build must
    compare with it as with a plain build (narrowed), not rebuild every model."""
    assert build_arguments(["build", "--quiet", "--log-level", "debug", "--no-use-colors",
                            "--printer-width=100", "-s", "x"]) == ["build", "-s", "x"]
    assert args_fingerprint(["build", "--quiet"]) == args_fingerprint(["build"])
    assert args_fingerprint(["build", "-q"]) == args_fingerprint(["build"])
    assert args_fingerprint(["build", "-s", "x"]) != args_fingerprint(["build"])
    demo = fingerprint(project, lake, ["build", "--quiet"], location=lake.parent)
    _touch(lake / "slices" / "run=r" / "t2.parquet", b"yy")
    plain = fingerprint(project, lake, ["build"], location=lake.parent)
    assert changed_lake_tables(demo, plain) == ["slices"]


@pytest.mark.parametrize(("what", "said"), [
    ("args", "the last build ran `build -s x`, not `build`"),
    ("location", "the warehouse was built in"),
    ("unrecorded", "recorded no lake tables"),
    ("none", "no record of an earlier build"),
    ("project", "the dbt project (or its --vars) changed"),
])
def test_why_a_build_is_not_narrowed_is_said(
    what: str, said: str, project: Path, lake: Path, tmp_path: Path
) -> None:
    now = fingerprint(project, lake, ["build"], location=lake.parent)
    assert said in why_not_narrowed(_last_build(what, now, project, lake, tmp_path), now)
