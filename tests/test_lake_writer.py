"""The lake writer's Parquet settings: what they change on disk, and what they must not.

Why: the writer picks compression per table and makes folders only when a
file cannot be opened (ingest/lake.py, cheaper for the many small files of
a trace); the rows read back must stay exactly the rows written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracehouse.ingest.lake import COMPRESS_FROM_ROWS, write_parquet_tmp


def _table(rows: int) -> pa.Table:
    return pa.table({
        "trace_id": pa.array(["t"] * rows),
        "ts": pa.array(range(rows), pa.int64()),
        "args": pa.array([f'{{"n": {i}}}' for i in range(rows)]),
    })


def _codecs(path: Path) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    return {meta.row_group(g).column(c).compression
            for g in range(meta.num_row_groups) for c in range(meta.num_columns)}


def test_small_table_is_written_uncompressed_and_reads_back_equal(tmp_path: Path) -> None:
    table = _table(3)
    final = tmp_path / "threads" / "run=r" / "t.parquet"
    written = write_parquet_tmp(table, final, "tok")
    assert _codecs(written) == {"UNCOMPRESSED"}
    assert pq.read_table(written).equals(table)


def test_table_at_the_threshold_is_zstd_and_reads_back_equal(tmp_path: Path) -> None:
    table = _table(COMPRESS_FROM_ROWS)
    written = write_parquet_tmp(table, tmp_path / "t.parquet", "tok")
    assert _codecs(written) == {"ZSTD"}
    assert pq.read_table(written).equals(table)


def test_missing_folders_are_made_and_existing_ones_reused(tmp_path: Path) -> None:
    first = tmp_path / "lake" / "slices" / "run=new" / "a.parquet"
    os.replace(write_parquet_tmp(_table(2), first, "tok"), first)
    second = first.with_name("b.parquet")
    os.replace(write_parquet_tmp(_table(2), second, "tok"), second)
    assert sorted(p.name for p in first.parent.iterdir()) == ["a.parquet", "b.parquet"]


def test_grouped_rows_are_written_a_bounded_group_at_a_time(tmp_path: Path,
                                                            monkeypatch) -> None:  # noqa: ANN001
    """A table written in ``group_by`` order is copied one row group at a time
    (lake.GROUPED_ROW_GROUP_ROWS, shrunk here to 2): the flag's rows first, NULL
    counted as false, no group mixing the two, every row once, order kept within
    each part; a table all on one side is written whole, uncopied."""
    from tracehouse.ingest import lake

    monkeypatch.setattr(lake, "GROUPED_ROW_GROUP_ROWS", 2)
    table = pa.table({"slice_id": pa.array(range(7), pa.int64()),
                      "has_role": pa.array([True, False, True, False, False, None, True])})
    written = pq.ParquetFile(write_parquet_tmp(table, tmp_path / "a.parquet", "tok",
                                               "has_role"))
    groups = [written.read_row_group(g).column("slice_id").to_pylist()
              for g in range(written.metadata.num_row_groups)]
    assert groups == [[0, 2], [6], [1, 3], [4, 5]]
    same = pq.ParquetFile(write_parquet_tmp(table.slice(3, 3), tmp_path / "b.parquet", "tok",
                                            "has_role"))
    assert same.metadata.num_row_groups == 1
    assert same.read().column("slice_id").to_pylist() == [3, 4, 5]
    empty = pq.ParquetFile(write_parquet_tmp(table.slice(0, 0), tmp_path / "c.parquet", "tok",
                                             "has_role"))
    assert empty.read().num_rows == 0 and empty.schema_arrow.equals(table.schema)


def _encodings(path: Path, column: str) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    index = meta.schema.names.index(column)
    return {encoding for g in range(meta.num_row_groups)
            for encoding in meta.row_group(g).column(index).encodings}


def test_integers_are_delta_encoded_and_duckdb_reads_them_back_equal(tmp_path: Path) -> None:
    """Integer columns of a compressed table are DELTA_BINARY_PACKED (cheaper to write
    than plain + zstd, and smaller): DuckDB, the build's reader, gets every value back."""
    import duckdb

    table = _table(COMPRESS_FROM_ROWS + 5)
    written = write_parquet_tmp(table, tmp_path / "t.parquet", "tok")
    assert "DELTA_BINARY_PACKED" in _encodings(written, "ts")
    assert "DELTA_BINARY_PACKED" not in _encodings(written, "args")
    back = duckdb.sql("select * from read_parquet($path)",
                      params={"path": str(written)}).to_arrow_table()
    assert back.equals(table)


def test_small_table_is_written_without_statistics_or_dictionary(tmp_path: Path) -> None:
    written = write_parquet_tmp(_table(3), tmp_path / "t.parquet", "tok")
    meta = pq.ParquetFile(written).metadata
    columns = [meta.row_group(0).column(c) for c in range(meta.num_columns)]
    assert not any(column.is_stats_set for column in columns)
    assert not any(column.has_dictionary_page for column in columns)
