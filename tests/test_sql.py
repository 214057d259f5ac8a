"""Ad-hoc SQL (`tracehouse sql`): formats, errors, read-only, and the unbuilt fallback."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from conftest import NASTY_NAME, Lake, synthetic_trace, write_trace
from tracehouse.sql import MAX_CELL_WIDTH, run_sql

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
    assert "\\n'quoted'" in body[0]
    separators = [[i for i, ch in enumerate(line) if ch == "|"] for line in [header, *body]]
    assert all(positions == separators[0] for positions in separators)

    long_name = "x" * (MAX_CELL_WIDTH * 2)
    code, text = _run(f"select '{long_name}' as name", built_warehouse.warehouse)
    cell = text.splitlines()[2]
    assert len(cell) == MAX_CELL_WIDTH and cell.endswith("…")


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
    assert code == 1
    assert text == ""
    err = capsys.readouterr().err
    assert "CatalogException" in err and "no_such_table" in err


def test_database_is_opened_read_only(
    built_warehouse: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _run("create table scribble as select 1 as x", built_warehouse.warehouse)
    assert code == 1
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
