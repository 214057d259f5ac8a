"""The guard on the session's shared warehouses (conftest.shared_read_only).

A test that writes into a shared warehouse would make the tests after it
depend on the order they ran in; the guard turns that write into a failure
at the session's end, naming the file, and copy_warehouse() is the way out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import copy_warehouse, shared_read_only, warehouse_fingerprint


def _warehouse(root: Path) -> Path:
    """A stand-in warehouse folder: a database file and one lake file."""
    (root / "lake" / "slices").mkdir(parents=True)
    (root / "lake" / "slices" / "a.parquet").write_bytes(b"rows")
    (root / "tracehouse.duckdb").write_bytes(b"tables")
    return root


def test_reading_passes(tmp_path: Path) -> None:
    root = _warehouse(tmp_path / "wh")
    with shared_read_only(root):
        assert (root / "tracehouse.duckdb").read_bytes() == b"tables"


@pytest.mark.parametrize("write", ["new file", "changed file", "removed file"])
def test_any_write_fails_naming_the_file(tmp_path: Path, write: str) -> None:
    root = _warehouse(tmp_path / "wh")
    database = root / "tracehouse.duckdb"
    with pytest.raises(pytest.fail.Exception, match="tracehouse.duckdb|stray"):
        with shared_read_only(root):
            if write == "new file":
                (root / "stray").write_text("x")
            elif write == "changed file":
                database.write_bytes(b"tables, rebuilt")
            else:
                database.unlink()


def test_a_copy_is_free_to_change(tmp_path: Path) -> None:
    root = _warehouse(tmp_path / "wh")
    before = warehouse_fingerprint(root)
    with shared_read_only(root):
        copy = copy_warehouse(root, tmp_path / "copy")
        (copy / "tracehouse.duckdb").write_bytes(b"tables, rebuilt")
        (copy / "lake" / "slices" / "b.parquet").write_bytes(b"more rows")
    assert warehouse_fingerprint(root) == before
    assert sorted(warehouse_fingerprint(copy)) == sorted([*before, "lake/slices/b.parquet"])
