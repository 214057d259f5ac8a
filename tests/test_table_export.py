"""``export_table``: any mart or table to CSV or Parquet, filtered by run, atomically.

Runs on the shared synthetic lake (conftest) after a real ``dbt build``, and
on a lake that was never built (the raw tables through in-memory views). The
slices hold a name with quotes, commas, a newline and ``<script>``: it must
come back from the CSV unchanged.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from conftest import NASTY_NAME, Lake, query_warehouse
from tracehouse.reports.table_export import ExportError, export_table

pytestmark = pytest.mark.slow


@pytest.fixture
def built(built_warehouse: Lake) -> Lake:
    """The session's synthetic warehouse (conftest), built once with every model; read-only."""
    return built_warehouse


def test_csv_round_trips_hostile_names(built: Lake, tmp_path: Path) -> None:
    out = tmp_path / "slices.csv"
    rows = export_table(built.warehouse, "stg_lake__slices", out,
                        run_id=built.run_id)
    with out.open(newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    expected = query_warehouse(
        built.warehouse, "select name from stg_lake__slices where run_id = ?",
        [built.run_id])
    assert rows == len(records) == len(expected) > 0
    assert sorted(record["name"] for record in records) == sorted(name for (name,) in expected)
    assert NASTY_NAME in {record["name"] for record in records}


def test_parquet_keeps_rows_and_types(built: Lake, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "iterations.parquet"
    rows = export_table(built.warehouse, "fct_rank_iterations", out)
    con = duckdb.connect()
    try:
        written = con.execute("select * from read_parquet(?) order by rank, iteration",
                              [str(out)]).fetchall()
        types = dict(con.execute("select column_name, column_type from "
                                 "(describe select * from read_parquet(?))", [str(out)]).fetchall())
    finally:
        con.close()
    expected = query_warehouse(
        built.warehouse, "select * from fct_rank_iterations order by rank, iteration")
    assert rows == len(written) == len(expected) > 0
    assert written == expected
    assert types["span_ns"] == "BIGINT" and types["overlap_ratio"] == "DOUBLE"
    # Sums stay integers too (a HUGEINT sum would be written as a double).
    for column in ("compute_ns", "busy_ns", "step_ns", "step_compute_ns", "kernel_count"):
        assert types[column] == "BIGINT", column
    phases = tmp_path / "phases.parquet"
    export_table(built.warehouse, "fct_microbatch_phases", phases)
    con = duckdb.connect()
    try:
        [(kind, total)] = con.execute(
            "select typeof(busy_ns), sum(busy_ns) // 1 from read_parquet(?) group by 1",
            [str(phases)]).fetchall()
    finally:
        con.close()
    assert kind == "BIGINT" and total > 0


def test_run_filter_is_bound(built: Lake, tmp_path: Path) -> None:
    [(total,)] = query_warehouse(built.warehouse, "select count(*) from fct_kernels")
    wh = built.warehouse
    assert export_table(wh, "fct_kernels", tmp_path / "a.csv", run_id=built.run_id) \
        == total > 0
    with pytest.raises(ExportError, match=r"no run .x' or 1=1 --. in fct_kernels; runs: run_a"):
        export_table(wh, "fct_kernels", tmp_path / "b.csv", run_id="x' or 1=1 --")
    assert not (tmp_path / "b.csv").exists()


def test_unknown_run_is_an_error_listing_the_runs(built: Lake, tmp_path: Path) -> None:
    """An unknown run is a mistake to report, not an empty export (``--run nope``)."""
    for table in ("fct_kernels", "slices", "dim_ranks"):
        with pytest.raises(ExportError, match=f"no run 'nope' in {table}; runs: {built.run_id}"):
            export_table(built.warehouse, table, tmp_path / "x.csv", run_id="nope")
    assert list(tmp_path.iterdir()) == []


def test_raw_tables_keep_their_names_and_columns_after_build(
    built: Lake, make_lake: Callable[..., Lake], tmp_path: Path
) -> None:
    """``export table slices`` exports the lake's slices (``ts``, ``dur``) after a build too."""
    import pyarrow.parquet as pq

    unbuilt = make_lake(run_id=built.run_id)
    for table in ("slices", "traces", "ingest_errors"):
        after, before = tmp_path / f"{table}-after.parquet", tmp_path / f"{table}-before.parquet"
        export_table(built.warehouse, table, after)
        export_table(unbuilt.warehouse, table, before)
        assert pq.read_schema(after) == pq.read_schema(before), table
    assert pq.read_table(tmp_path / "slices-after.parquet").num_rows == built.row_count("slices")


def test_table_names_are_checked_not_formatted(built: Lake, tmp_path: Path) -> None:
    wh = built.warehouse
    for bad in ("fct_kernels; drop table dim_ranks", '"fct_kernels"', "nope",
                "fct_kernels where 1=1"):
        with pytest.raises(ExportError, match="no table"):
            export_table(wh, bad, tmp_path / "x.csv")
    assert export_table(wh, "FCT_KERNELS", tmp_path / "upper.csv") > 0  # case-insensitive
    with pytest.raises(ExportError, match="no run_id column"):
        export_table(wh, "kernel_kind_patterns", tmp_path / "x.csv", run_id="run_a")
    assert export_table(wh, "kernel_kind_patterns", tmp_path / "seed.csv") > 0
    # Models dbt keeps in other schemas are named as a query names them, or by bare name.
    assert export_table(wh, "seeds.kernel_kind_patterns", tmp_path / "seed2.csv") > 0
    assert (tmp_path / "seed2.csv").read_text() == (tmp_path / "seed.csv").read_text()


def test_format_from_suffix_or_argument(built: Lake, tmp_path: Path) -> None:
    wh = built.warehouse
    with pytest.raises(ExportError, match="cannot tell the format"):
        export_table(wh, "dim_ranks", tmp_path / "ranks.txt")
    with pytest.raises(ExportError, match="unknown format"):
        export_table(wh, "dim_ranks", tmp_path / "ranks.csv", fmt="xlsx")
    export_table(wh, "dim_ranks", tmp_path / "ranks.txt", fmt="parquet")
    assert (tmp_path / "ranks.txt").read_bytes()[:4] == b"PAR1"
    export_table(wh, "dim_ranks", tmp_path / "ranks.PQ")
    assert (tmp_path / "ranks.PQ").read_bytes()[:4] == b"PAR1"


def test_failures_leave_the_old_file_and_no_temporaries(built: Lake,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "ranks.csv"
    out.write_text("old")
    with pytest.raises(ExportError):
        export_table(built.warehouse, "missing_mart", out)
    assert out.read_text() == "old"
    export_table(built.warehouse, "dim_ranks", out)
    assert out.read_text().startswith("run_id,rank")
    assert [path.name for path in tmp_path.iterdir()] == ["ranks.csv"]


def test_lake_tables_export_before_any_build(make_lake: Callable[..., Lake],
                                             tmp_path: Path) -> None:
    lake = make_lake(run_id="fresh", ranks=3)
    out = tmp_path / "slices.parquet"
    assert export_table(lake.warehouse, "slices", out, run_id="fresh") == lake.row_count("slices")
    with pytest.raises(ExportError, match="no table 'fct_kernels'"):
        export_table(lake.warehouse, "fct_kernels", tmp_path / "k.csv")
