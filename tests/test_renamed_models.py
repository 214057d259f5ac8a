"""A warehouse built before issue 35 renamed intermediate models keeps working.

Issue 35 renamed intermediate models (``int_traces`` -> ``int_traces_loaded``,
...; the marts kept their names). dbt never drops the relation of a renamed
model, so a warehouse built before holds the old tables; the on-run-end hook
``drop_retired_models`` drops them on the next build, and until then the
commands, which read marts, work as before, and the lake-freshness note still
reads the old table of built traces. The warehouse here is a copy of the
session's built one with the new tables given back their old names, as a
build before the rename left them.
"""

from __future__ import annotations

import duckdb
import pytest

from conftest import Lake, copy_warehouse, synthetic_trace, write_trace
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.build.freshness import unbuilt_traces
from tracehouse.cli import main
from tracehouse.core.warehouse import Warehouse

pytestmark = pytest.mark.slow

#: Intermediate tables issue 35 renamed: old name -> new name.
RENAMED = {
    "int_traces": "int_traces_loaded",
    "int_step_windows": "int_step_windows_resolved",
    "int_nsys_iteration_windows": "int_nsys_iterations_windowed",
    "int_kernel_short_names": "int_kernel_short_names_extracted",
    "int_rank_clock_offsets": "int_rank_clock_offsets_estimated",
    "int_comm_groups_matched": "int_process_groups_matched",
}


def _intermediate_tables(warehouse: Warehouse) -> set[str]:
    with duckdb.connect(str(warehouse.database), read_only=True) as con:
        return {name for (name,) in con.execute(
            "select table_name from information_schema.tables "
            "where table_schema = 'intermediate'").fetchall()}


@pytest.fixture
def before_rename(built_warehouse: Lake, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    """A copy of the built warehouse whose renamed tables carry their old names,
    and one more trace in the lake that no build has seen."""
    root = copy_warehouse(built_warehouse.warehouse, tmp_path_factory.mktemp("old") / "wh")
    warehouse = Warehouse(root)
    built = _intermediate_tables(warehouse)
    with duckdb.connect(str(warehouse.database)) as con:
        for old, new in RENAMED.items():
            assert new in built, f"{new} was not built"
            con.execute(f"alter table intermediate.{new} rename to {old}")
    write_trace(root, synthetic_trace(built_warehouse.run_id, "run_a-rank2", 2))
    return warehouse


def test_the_freshness_note_reads_the_old_table_of_built_traces(
        before_rename: Warehouse, capsys: pytest.CaptureFixture[str]) -> None:
    unbuilt = unbuilt_traces(before_rename)
    assert unbuilt is not None and unbuilt.traces_by_run == {"run_a": 1}
    assert main(["sql", "select count(*) as ranks from dim_ranks", "--format", "csv",
                 "--warehouse", str(before_rename.root)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "ranks\n2\n"
    assert "note: the lake has 1 trace(s) newer than the last build" in captured.err


def test_the_next_build_drops_the_old_tables(
        before_rename: Warehouse, capsys: pytest.CaptureFixture[str]) -> None:
    # Any run or build ends with the hook; one cheap model is enough to run it.
    assert run_dbt(["run", "--select", "int_traces_loaded"], before_rename.root) == EXIT_OK
    tables = _intermediate_tables(before_rename)
    assert not set(RENAMED) & tables, sorted(set(RENAMED) & tables)
    assert "int_traces_loaded" in tables
    out = capsys.readouterr().out
    for old in RENAMED:
        assert f"dropped intermediate.{old}: no model builds it any more" in out
