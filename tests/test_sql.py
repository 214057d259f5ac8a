"""Ad-hoc SQL (`tracehouse sql`): formats, errors, read-only, and the unbuilt fallback."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from conftest import NASTY_NAME, Lake, synthetic_trace, write_trace
from tracehouse.cli import main
from tracehouse.core.warehouse import Warehouse
from tracehouse.query.result_formats import MAX_CELL_WIDTH
from tracehouse.query.sql import run_sql

pytestmark = pytest.mark.slow

#: The slice whose name holds quotes, commas, a newline and <script>.
NASTY_QUERY = (
    "select trace_id, slice_id, name, ts_ns, dur_ns, process_group_ranks, parent_id"
    " from stg_lake__slices where slice_id = 7 order by trace_id"
)


def _run(query: str, warehouse: Path, fmt: str = "table") -> tuple[int, str]:
    out = io.StringIO()
    code = run_sql(query, warehouse, fmt=fmt, out=out)
    return code, out.getvalue()


def test_json_is_one_array_of_objects_with_exact_values(built_warehouse: Lake) -> None:
    code, text = _run(NASTY_QUERY, built_warehouse.warehouse, "json")
    assert code == 0
    records = json.loads(text)
    assert isinstance(records, list) and len(records) == 2
    first = records[0]
    assert first["name"] == NASTY_NAME
    assert first["slice_id"] == 7 and isinstance(first["slice_id"], int)
    # Absolute-clock ns exceed 2**53: they must stay exact integers.
    assert first["ts_ns"] == 1_700_000_000_000_005_000
    assert first["process_group_ranks"] is None
    assert first["parent_id"] == 0


def test_json_nested_and_odd_types(built_warehouse: Lake) -> None:
    query = (
        "select process_group_ranks, ingested_at, 'a'::blob as raw, 1.50::decimal(4, 2) as dec,"
        " 'nan'::double as nan_value, 12::hugeint as huge"
        " from stg_lake__slices join stg_lake__traces using (trace_id)"
        " where slice_id = 4 order by trace_id limit 1"
    )
    code, text = _run(query, built_warehouse.warehouse, "json")
    assert code == 0
    [record] = json.loads(text)
    assert record == {
        "process_group_ranks": [0, 1],
        "ingested_at": "2024-01-01T00:00:00+00:00",
        "raw": "a",
        "dec": 1.5,
        "nan_value": None,
        "huge": 12,
    }


def test_json_of_no_rows_is_an_empty_array(built_warehouse: Lake) -> None:
    code, text = _run(
        "select * from stg_lake__traces where false", built_warehouse.warehouse, "json"
    )
    assert code == 0
    assert json.loads(text) == []


def test_csv_round_trips_quotes_commas_and_newlines(built_warehouse: Lake) -> None:
    code, text = _run(NASTY_QUERY, built_warehouse.warehouse, "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [
        "trace_id",
        "slice_id",
        "name",
        "ts_ns",
        "dur_ns",
        "process_group_ranks",
        "parent_id",
    ]
    assert len(rows) == 3
    assert rows[1][2] == NASTY_NAME
    assert rows[1][3] == "1700000000000005000"
    assert rows[1][5] == ""  # NULL


def test_csv_lists_are_json(built_warehouse: Lake) -> None:
    query = "select process_group_ranks from stg_lake__slices where slice_id = 4 limit 1"
    code, text = _run(query, built_warehouse.warehouse, "csv")
    assert code == 0
    assert text.splitlines()[1] == '"[0, 1]"'


def test_table_is_aligned_one_line_per_row_and_clips_wide_cells(built_warehouse: Lake) -> None:
    code, text = _run(NASTY_QUERY, built_warehouse.warehouse, "table")
    assert code == 0
    lines = text.splitlines()
    header, rule, *body, footer = lines
    assert header.split(" | ")[0].strip() == "trace_id"
    assert set(rule) <= {"-", "+"}
    assert len(body) == 2  # the newline in the name is shown as \n, not a line break
    assert footer == "(2 rows)"
    wide = io.StringIO()
    assert run_sql(NASTY_QUERY, built_warehouse.warehouse, out=wide, wide=True) == 0
    assert "\\n'quoted'" in wide.getvalue().splitlines()[2]
    separators = [[i for i, ch in enumerate(line) if ch == "|"] for line in [header, *body]]
    assert all(positions == separators[0] for positions in separators)

    long_name = "x" * MAX_CELL_WIDTH + "y" * MAX_CELL_WIDTH
    code, text = _run(f"select '{long_name}' as name", built_warehouse.warehouse)
    cell = text.splitlines()[2]
    # Cut in the middle: both ends stay visible.
    assert len(cell) == MAX_CELL_WIDTH and cell.startswith("x") and cell.endswith("y")
    assert "…" in cell


def test_table_right_aligns_numbers_and_shows_null(built_warehouse: Lake) -> None:
    code, text = _run(
        "select 5 as n, null as v union all select 12345, 'x'", built_warehouse.warehouse
    )
    assert code == 0
    lines = text.splitlines()
    assert lines[2].startswith("    5 | NULL")
    assert lines[3].startswith("12345 | x")


def test_sql_error_names_it_on_stderr(
    built_warehouse: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run("select * from no_such_table", built_warehouse.warehouse)
    assert code == 2  # an unknown table is a usage error (README: exit codes)
    assert text == ""
    err = capsys.readouterr().err
    assert "error: unknown table no_such_table" in err and "show tables" in err
    # Other errors of a query that names real tables stay exit 1.
    assert _run("select no_such_column from traces", built_warehouse.warehouse)[0] == 1


@pytest.mark.parametrize("query", [
    "create table scribble as select 1 as x",
    "drop view slices",
    "drop table fct_kernels",
    "insert into traces select * from traces",
    "delete from traces",
    "select 1; drop view traces",
])  # fmt: skip
def test_database_is_opened_read_only(
    built_warehouse: Lake, query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run(query, built_warehouse.warehouse)
    assert (code, text) == (2, "")
    err = capsys.readouterr().err
    assert "read-only" in err.lower() and "Success" not in err
    assert _run("select count(*) from slices", built_warehouse.warehouse)[0] == 0


def test_unbuilt_warehouse_is_read_only_too(make_lake, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the build the queries run in memory; a drop still is not a change to make."""
    lake = make_lake(ranks=1)
    assert _run("drop view slices", lake.warehouse) == (2, "")
    assert "read-only" in capsys.readouterr().err.lower()


def test_unknown_format_is_a_usage_error(built_warehouse: Lake) -> None:
    assert run_sql("select 1", built_warehouse.warehouse, fmt="xml", out=io.StringIO()) == 2


def test_lake_is_queryable_before_build(make_lake, capsys: pytest.CaptureFixture[str]) -> None:
    """Right after ingest: lake tables are views in memory, committed traces only."""
    lake = make_lake(ranks=2)
    write_trace(lake.warehouse, synthetic_trace("run_a", "half-written", rank=5), commit=False)
    query = "select count(distinct trace_id), count(*) from slices"
    code, text = _run(query, lake.warehouse, "json")
    assert code == 0
    [record] = json.loads(text)
    assert list(record.values()) == [2, lake.row_count("slices")]
    assert "not built yet" in capsys.readouterr().err
    assert not (lake.warehouse / "tracehouse.duckdb").exists()

    code, text = _run("select count(*) as n from ingest_errors", lake.warehouse, "csv")
    assert (code, text) == (0, "n\n0\n")


def test_nothing_ingested_says_so(warehouse_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run("select * from slices", warehouse_dir)
    assert code == 1
    assert "tracehouse ingest" in capsys.readouterr().err


# --------------------------------------------------------------------------- one set of names

#: The lake's tables, by the names ingest's messages and the README use.
RAW_TABLES = ("slices", "traces", "ingest_errors", "flows", "threads", "processes",
              "process_groups", "topology_groups", "pp_timer_events")


def _columns(warehouse: Path, table: str) -> list[str]:
    code, text = _run(f"select * from {table} limit 0", warehouse, "csv")
    assert code == 0, table
    return text.splitlines()[0].split(",")


def test_raw_tables_keep_names_and_columns_after_build(
    built_warehouse: Lake, make_lake, capsys: pytest.CaptureFixture[str]
) -> None:
    """``slices``/``ingest_errors`` with ``ts``/``dur`` work before and after the build alike."""
    unbuilt = make_lake(ranks=1).warehouse
    for table in RAW_TABLES:
        assert _columns(built_warehouse.warehouse, table) == _columns(unbuilt, table)
    code, text = _run("select count(*) as n, min(ts) as first_ts, sum(dur) as total from slices",
                      built_warehouse.warehouse, "json")
    assert code == 0
    [record] = json.loads(text)
    assert record["n"] == built_warehouse.row_count("slices")
    assert record["first_ts"] == 1_700_000_000_000_000_000
    code, text = _run("select count(*) as n from ingest_errors", built_warehouse.warehouse, "csv")
    assert (code, text) == (0, "n\n0\n")
    # The marts and staging views are still there beside them.
    code, _ = _run("select count(*) from fct_kernels join stg_lake__traces using (trace_id)",
                   built_warehouse.warehouse)
    assert code == 0
    assert "CatalogException" not in capsys.readouterr().err


def test_raw_views_hold_committed_traces_only_after_build(built_warehouse: Lake) -> None:
    code, text = _run("select count(distinct trace_id) as n from slices",
                      built_warehouse.warehouse, "csv")
    assert (code, text) == (0, f"n\n{len(built_warehouse.trace_ids)}\n")


# --------------------------------------------------------------------------- odd queries


@pytest.mark.parametrize("query", ["", "   ", "-- c", ";", "\n;\n-- only a comment"])
def test_empty_query_is_a_usage_error_not_a_traceback(
    built_warehouse: Lake, query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run(query, built_warehouse.warehouse)
    assert (code, text) == (2, "")
    assert "query is empty" in capsys.readouterr().err


def test_query_from_standard_input(built_warehouse: Lake, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"select count(*) as n\nfrom traces;\n"))
    monkeypatch.setattr("sys.stdin", stdin)
    code = main(["sql", "-", "--format", "csv", "--warehouse", str(built_warehouse.warehouse)])
    assert code == 0
    assert capsys.readouterr().out == f"n\n{len(built_warehouse.trace_ids)}\n"

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"select '\xff'")))
    assert main(["sql", "-", "--warehouse", str(built_warehouse.warehouse)]) == 2
    assert "standard input" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tracehouse {version('tracehouse')}"


# --------------------------------------------------------------------------- file access


def test_files_outside_the_warehouse_are_out_of_reach(
    built_warehouse: Lake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = built_warehouse.warehouse
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    target = tmp_path / "out.csv"
    lake_target = Warehouse(wh).table_dir("slices") / "evil.parquet"
    for query in (f"copy (select 1 as x) to '{target}'",
                  f"copy (select 1 as x) to '{lake_target}'",
                  f"export database '{tmp_path / 'dump'}'"):
        code, _ = _run(query, wh)
        assert code == 2, query
        assert "--allow-files" in capsys.readouterr().err
    slices_dir = Warehouse(wh).table_dir("slices")
    escape = f"{slices_dir}/{os.path.relpath(secret, slices_dir)}"  # out of the lake by ../
    for query in (f"select * from read_csv('{secret}')", "select * from read_text('/etc/passwd')",
                  f"select * from read_csv('{escape}')",
                  f"attach '{tmp_path / 'other.duckdb'}' as other",
                  "set enable_external_access = true", "install httpfs"):
        code, text = _run(query, wh)
        assert code == 1 and "hunter2" not in text, query
    assert not target.exists() and not lake_target.exists()
    assert not (tmp_path / "dump").exists() and not (tmp_path / "other.duckdb").exists()
    # The lake itself stays readable, through the raw views and the staging views.
    assert _run("select count(*) from slices", wh)[0] == 0
    assert _run("select count(*) from stg_lake__slices", wh)[0] == 0


def test_allow_files_opens_the_file_system(built_warehouse: Lake, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    code = main(["sql", f"copy (select count(*) as n from traces) to '{target}'",
                 "--allow-files", "--warehouse", str(built_warehouse.warehouse)])
    assert code == 0
    assert target.read_text() == f"n\n{len(built_warehouse.trace_ids)}\n"
    code, text = _run(f"select * from read_csv('{target}')", built_warehouse.warehouse, "csv")
    assert code == 1  # the default again: one flag, one query


# --------------------------------------------------------------------------- long values

#: Four real kernel names (DLRM's traces) that share their first ~60 characters.
ELEMENTWISE = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::" + functor
    + ", at::detail::Array<char*, " + arity + "> >(int, at::native::" + functor
    + ", at::detail::Array<char*, " + arity + ">)"
    for functor, arity in (
        ("AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >",
         "2"),
        ("BUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >",
         "2"),
        ("CUDAFunctor_add<float>", "3"),
        ("CUDAFunctor_add<long>", "3"),
    )
]


def test_long_names_that_differ_stay_different(built_warehouse: Lake) -> None:
    literal = " union all ".join(
        f"select {i} as i, '{name}' as name" for i, name in enumerate(ELEMENTWISE))
    query = f"select name from ({literal}) order by i"
    out = io.StringIO()
    assert run_sql(query, built_warehouse.warehouse, out=out) == 0
    cells = [line.strip() for line in out.getvalue().splitlines()[2:-1]]
    assert len(set(cells)) == len(ELEMENTWISE)
    assert all(len(cell) < len(name) for cell, name in zip(cells, ELEMENTWISE))

    out = io.StringIO()
    assert run_sql(query, built_warehouse.warehouse, out=out, wide=True) == 0
    assert [line.strip() for line in out.getvalue().splitlines()[2:-1]] == ELEMENTWISE


def test_only_the_raw_tables_a_query_names_are_read(built_warehouse: Lake, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Each raw view reads every file footer of its table: made only when the query names it."""
    import shutil

    from tracehouse.query.lake_connection import referenced_lake_tables

    assert referenced_lake_tables('select * from "Slices" join fct_kernels using (rank)') == {
        "slices"}
    copy = tmp_path / "warehouse"
    shutil.copytree(built_warehouse.warehouse, copy, symlinks=True)
    # A broken file in one table: a query on the marts never touches it.
    (Warehouse(copy).partition_dir("flows", "run_a") / "broken.parquet").write_bytes(b"junk")
    code, text = _run("select count(*) as n from fct_kernels", copy, "csv")
    assert code == 0 and text.startswith("n\n")
    code, _ = _run("select count(*) from flows", copy)
    assert code == 1 and "broken.parquet" in capsys.readouterr().err
