"""ingest.parquet_writer writes the bytes pyarrow.parquet writes, without importing it.

Why these tests: the lake's files must not change when the writer does (lake
digests, readers' row-group skipping), and the point of the module is the
memory of ``pyarrow.parquet``'s imports, which a later import on the ingest
path would silently bring back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracehouse.ingest import lake, parquet_writer
from tracehouse.ingest.parquet_writer import ParquetWriter, write_schema_file
from tracehouse.ingest.schema import LAKE_TABLES

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto"


def _table(rows: int) -> pa.Table:
    return pa.table({
        "ts": pa.array(range(rows), pa.int64()),
        "name": pa.array([f"op{i % 7}" for i in range(rows)], pa.string()),
        "args": pa.array([None if i % 3 else f'{{"i": {i}}}' for i in range(rows)],
                         pa.string()),
        "has_role": pa.array([i % 5 == 0 for i in range(rows)], pa.bool_()),
    })


@pytest.mark.parametrize("rows", [0, 3, 5000])
@pytest.mark.parametrize("grouped", [False, True])
def test_same_bytes_as_pyarrow_parquet(tmp_path: Path, rows: int, grouped: bool) -> None:
    table = _table(rows)
    options = lake._write_options(table, grouped=grouped)
    with ParquetWriter(tmp_path / "ours.parquet", table.schema, **options) as writer:
        writer.write_table(table, row_group_size=1000)
    with pq.ParquetWriter(tmp_path / "theirs.parquet", table.schema, **options) as writer:
        writer.write_table(table, row_group_size=1000)
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "theirs.parquet").read_bytes()
    assert pq.read_table(tmp_path / "ours.parquet").equals(table)


@pytest.mark.parametrize("table", sorted(LAKE_TABLES))
def test_schema_files_as_write_metadata_writes_them(tmp_path: Path, table: str) -> None:
    write_schema_file(LAKE_TABLES[table], tmp_path / "ours")
    pq.write_metadata(LAKE_TABLES[table], tmp_path / "theirs")
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()


def test_a_missing_folder_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ParquetWriter(tmp_path / "no" / "x.parquet", _table(1).schema)


def test_a_table_of_another_schema_is_refused(tmp_path: Path) -> None:
    with ParquetWriter(tmp_path / "x.parquet", _table(1).schema) as writer, \
            pytest.raises(ValueError, match="schema"):
        writer.write_table(pa.table({"other": [1]}))


def test_falls_back_to_the_public_writer_when_the_private_one_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a pyarrow whose private writer lacks an argument the public one passes.
    monkeypatch.setitem(parquet_writer._PUBLIC_DEFAULTS, "no_such_argument", 1)
    monkeypatch.setattr(parquet_writer, "_core_usable", True)
    table = _table(10)
    with ParquetWriter(tmp_path / "x.parquet", table.schema) as writer:
        writer.write_table(table)
    assert parquet_writer._core_usable is False
    assert pq.read_table(tmp_path / "x.parquet").equals(table)
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"]


_CHILD = """
import sys
from pathlib import Path
from tracehouse.ingest.no_pandas import keep_pandas_out
keep_pandas_out()
from tracehouse.ingest.runner import ingest_paths
result = ingest_paths([Path(sys.argv[1])], Path(sys.argv[2]), progress=False)
assert len(result.loaded) == 1, result.failed
print("pyarrow.parquet" in sys.modules, "pyarrow.fs" in sys.modules)
"""


def test_an_ingest_into_a_fresh_lake_never_imports_pyarrow_parquet(tmp_path: Path) -> None:
    trace = SHARED / "single_rank" / "sampled_128rank_job_rank-0.json.gz"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(trace), str(tmp_path / "wh")],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.split() == ["False", "False"]
