"""Incremental per-trace models (macros/per_trace.sql) give what a full build gives.

A simulated TP2 x PP2 x DP2 run is ingested one iteration at a time into a
real warehouse through the real ingest, and the incremental models are built
after each step with the real dbt project. After each incremental build a
copy of the warehouse is rebuilt with ``--full-refresh`` and every
incremental model is compared with it, table by table, with EXCEPT ALL both
ways. The last steps change one trace file (new content, same path: ingest
replaces its rows) and unload another (``ingest.lake.remove_trace``): the
changed trace must be recomputed and the unloaded one's rows must vanish.
A changed topology file (no trace changed) must re-resolve the run's
kernels' groups (fct_kernels joins the per-run lookup in), and a changed
dbt project makes `tracehouse build` refresh every incremental table.

A marker written into the rows of iteration 1 shows that adding iteration 2
does not recompute iteration 1 (a recomputed row would lose the marker).

Each test starts from module fixtures (iteration 1 built, iteration 2
ingested; then built incrementally) and works on a copy when it changes the
warehouse, so no test depends on what another one left behind.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from conftest import query_warehouse as _query
from tracehouse.build import dbt as dbt_module
from tracehouse.build.dbt import EXIT_OK, project_dir, run_dbt
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest import lake
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, simulate_run, trace_path

pytestmark = pytest.mark.slow

RUN = "inc"
WORLD = 8
#: Every model of the chain: the per-trace incremental ones, the tables
#: rebuilt each time and the mart views (all must equal a full refresh).
COMPARED_MODELS = [
    "intermediate.int_traces_loaded",
    "intermediate.int_process_groups_reported",
    "intermediate.int_step_windows_resolved",
    "intermediate.int_slices_contextualized",
    "intermediate.int_cpu_steps_classified",
    "intermediate.int_cpu_collectives_classified",
    "intermediate.int_kernel_names_classified",
    "intermediate.int_kernel_phases_matched",
    "intermediate.int_kernels_classified",
    "intermediate.int_annotation_ranges_nested",
    "intermediate.int_annotation_ranges_projected",
    "intermediate.int_process_groups_matched",
    "intermediate.int_microbatch_steps_chunked",
    "intermediate.int_kernel_intervals_merged",
    "intermediate.int_rank_iterations_swept",
    "intermediate.int_stream_idle_categorized",
    "intermediate.int_microbatch_phases_swept",
    "intermediate.int_stage_work_merged",
    "intermediate.int_rank_steps_swept",
    "intermediate.int_rank_steps_timed",
    "intermediate.int_kernels_placed",
    "intermediate.int_cpu_collectives_placed",
    "intermediate.int_rank_iterations_measured",
    "intermediate.int_microbatch_phases_timed",
    "intermediate.int_pipeline_stages_windowed",
    "intermediate.int_bubble_parts_swept",
    "main.fct_kernels",
    "main.fct_rank_iterations",
    "main.fct_kernel_summary",
    "main.fct_microbatch_phases",
    "main.fct_cpu_steps",
    "main.fct_pipeline_bubbles",
    "main.fct_pipeline_bubble_parts",
    "main.fct_cpu_collectives",
    "intermediate.int_collective_calls_sequenced",
    "intermediate.int_collective_members_matched",
    "intermediate.int_rank_clock_offsets_estimated",
    "intermediate.int_collective_members_aligned",
    "main.fct_collectives",
    "main.fct_collective_ranks",
    "main.fct_stragglers",
    "main.dim_rank_clock_offsets",
    "main.fct_idle_breakdown",
    "main.fct_kernel_launches",
    "main.fct_run_summary",
    "main.fct_rank_summary",
    "main.fct_stage_summary",
    "main.fct_run_kernel_summary",
    "main.fct_iteration_summary",
    "main.fct_group_communication",
    "main.fct_annotation_ranges",
]
#: Build only the chain and what it needs, seeds included (the rest of the
#: project and the dbt tests are covered by other tests).
SELECT = [
    "--select", "+fct_rank_iterations", "+fct_kernel_summary", "+fct_microbatch_phases",
    "+fct_cpu_steps", "+fct_pipeline_bubbles", "+fct_pipeline_bubble_parts", "+fct_cpu_collectives",
    "+fct_collectives", "+fct_collective_ranks", "+fct_stragglers", "+dim_rank_clock_offsets",
    "+fct_idle_breakdown", "+fct_kernel_launches",
    "+fct_run_summary", "+fct_rank_summary", "+fct_stage_summary", "+fct_run_kernel_summary",
    "+fct_iteration_summary", "+fct_group_communication", "+fct_annotation_ranges",
    "--resource-type", "seed", "--resource-type", "model",
]  # fmt: skip
#: Per per-trace model: a column overwritten with a marker in iteration 1's
#: rows. Rows an incremental build leaves alone keep the marker; recomputed
#: rows lose it.
ITERATION_1_TRACES = (
    "trace_id in (select trace_id from main.stg_lake__traces where iteration = 1)"
)
MARKERS = {
    "intermediate.int_traces_loaded": ("path", "'untouched'"),
    "intermediate.int_process_groups_reported": ("backend_config", "'untouched'"),
    "intermediate.int_step_windows_resolved": ("end_ns", "-1"),
    "intermediate.int_slices_contextualized": ("name", "'untouched'"),
    "intermediate.int_cpu_steps_classified": ("function_name", "'untouched'"),
    "intermediate.int_kernels_classified": ("launch_name", "'untouched'"),
    "intermediate.int_kernel_phases_matched": ("phase_group_kind", "'untouched'"),
    "intermediate.int_annotation_ranges_nested": ("annotation_path", "'untouched'"),
    "intermediate.int_annotation_ranges_projected": ("kernel_count", "-1"),
    "intermediate.int_kernel_intervals_merged": ("interval_count", "-1"),
    "intermediate.int_rank_iterations_swept": ("overlap_ns", "-1"),
    "intermediate.int_stream_idle_categorized": ("gap_count", "-1"),
    "intermediate.int_microbatch_phases_swept": ("overlap_ns", "-1"),
    "intermediate.int_stage_work_merged": ("work_count", "-1"),
    "intermediate.int_rank_steps_swept": ("step_idle_ns", "-1"),
    "intermediate.int_collective_calls_sequenced": ("collective_name", "'untouched'"),
}


@dataclass
class Runs:
    """Two simulated runs of the same configuration; only their jitter seed differs."""

    main: Path
    other_seed: Path
    parked: Path


def _build(warehouse: Path, *extra: str) -> None:
    assert run_dbt(["build", *SELECT, *extra], warehouse) == EXIT_OK


def _build_plain(warehouse: Path) -> None:
    assert run_dbt(["build"], warehouse) == EXIT_OK


@contextmanager
def _project_at(project: Path) -> Iterator[None]:
    """Run tracehouse's dbt calls on another copy of the project."""
    original = dbt_module.project_dir
    dbt_module.project_dir = lambda: project
    try:
        yield
    finally:
        dbt_module.project_dir = original


def _project_copy(project: Path) -> Path:
    """A copy of the dbt project (what dbt reads), to edit without touching the real one."""
    shutil.copytree(project_dir(), project, ignore=shutil.ignore_patterns(
        ".venv", ".git", "warehouse", "target", "logs", "__pycache__", "tests", "benchmarks"))
    shutil.copytree(project_dir() / "tests" / "dbt", project / "tests" / "dbt")
    return project


def _ingest(paths: list[Path], warehouse: Path) -> None:
    result = ingest_paths(paths, warehouse=warehouse, run=RUN, progress=False)
    assert not result.failed, result.failed


def _differences(incremental: Path, full: Path) -> dict[str, tuple[int, int, int]]:
    """Per model: (rows in full, rows only in incremental, rows only in full)."""
    con = duckdb.connect()
    try:
        con.execute("attach ? as incremental (read_only)", [str(Warehouse(incremental).database)])
        con.execute("attach ? as full_refresh (read_only)", [str(Warehouse(full).database)])
        out = {}
        for model in COMPARED_MODELS:
            inc = f"incremental.{model}"
            ful = f"full_refresh.{model}"
            [(rows,)] = con.execute(f"select count(*) from {ful}").fetchall()
            [(extra,)] = con.execute(
                f"select count(*) from (select * from {inc} except all select * from {ful})"
            ).fetchall()
            [(missing,)] = con.execute(
                f"select count(*) from (select * from {ful} except all select * from {inc})"
            ).fetchall()
            out[model] = (rows, extra, missing)
        return out
    finally:
        con.close()


def _assert_same_as_full_refresh(warehouse: Path, scratch: Path) -> None:
    """Copy the warehouse, rebuild the copy from scratch, compare every model of the chain."""
    full = scratch / "full"
    shutil.rmtree(full, ignore_errors=True)
    shutil.copytree(warehouse, full)
    _build(full, "--full-refresh")
    differences = _differences(warehouse, full)
    for model, (rows, extra, missing) in differences.items():
        assert rows > 0, f"{model} is empty: the comparison would prove nothing"
        assert (extra, missing) == (0, 0), (model, differences[model])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("incremental_runs")
    made = []
    for seed in (0, 1):
        config = SimConfig(
            layers=4, hidden=256, heads=8, seq_length=256, vocab=1024,
            tp=2, pp=2, dp=2, microbatches=4, iterations=2, seed=seed, gpus_per_node=4,
        )  # fmt: skip
        made.append(simulate_run(config, root / f"seed{seed}", jobs=1).out_dir)
    # Iteration 2 waits outside the run folder until the test loads it.
    parked = root / "parked_iteration_2"
    shutil.move(made[0] / "iteration_2", parked)
    return Runs(main=made[0], other_seed=made[1], parked=parked)


@pytest.fixture(scope="module")
def iteration_2_ingested(runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Iteration 1 loaded and built (the incremental tables exist), then iteration 2 ingested.

    Shared by the tests: a test that changes it works on a copy.
    """
    root = tmp_path_factory.mktemp("incremental_ingested") / "warehouse"
    _ingest([runs.main], root)
    _build(root)
    shutil.move(runs.parked, runs.main / "iteration_2")
    _ingest([runs.main], root)  # iteration 1 is skipped: unchanged
    return root


@pytest.fixture(scope="module")
def iteration_2_built(iteration_2_ingested: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``iteration_2_ingested`` built incrementally (iteration 2 lands).

    Shared by the tests: a test that changes it works on a copy.
    """
    root = tmp_path_factory.mktemp("incremental_built") / "warehouse"
    shutil.copytree(iteration_2_ingested, root)
    # At debug: test_build_log_shows_one_insert_... reads the statements from dbt's log.
    _build(root, "--log-level-file", "debug")
    return root


def _copy(warehouse: Path, destination: Path) -> Path:
    shutil.copytree(warehouse, destination)
    return destination


def test_adding_an_iteration_matches_full_refresh_and_keeps_the_others(
    iteration_2_ingested: Path, iteration_2_built: Path, tmp_path: Path
) -> None:
    # Mark iteration 1's rows in a copy, build the copy incrementally: the
    # marks survive (iteration 1 was not recomputed) and iteration 2 lands.
    marked = _copy(iteration_2_ingested, tmp_path / "marked")
    con = duckdb.connect(str(Warehouse(marked).database))
    try:
        for model, (column, value) in MARKERS.items():
            con.execute(f"update {model} set {column} = {value} where {ITERATION_1_TRACES}")
    finally:
        con.close()
    _build(marked)
    for model, (column, value) in MARKERS.items():
        [(kept, total)] = _query(
            marked,
            f"select count(*) filter ({column} = {value}), count(*) from {model}"
            f" where {ITERATION_1_TRACES}",
        )
        assert kept == total > 0, f"{model}: iteration 1 was recomputed ({kept} of {total} kept)"
    iterations = _query(marked, "select distinct iteration from fct_rank_iterations order by 1")
    assert iterations == [(1,), (2,)]

    _assert_same_as_full_refresh(iteration_2_built, tmp_path)
    [(ranks,)] = _query(
        iteration_2_built, "select count(*) from fct_rank_iterations where iteration = 2"
    )
    assert ranks == WORLD


def test_incremental_build_names_the_new_traces_so_scans_skip_the_others(
    iteration_2_built: Path,
) -> None:
    # The per-trace models list the traces they compute as literals (DuckDB
    # prunes the other traces' Parquet files and row groups on them; a
    # subquery cannot be pushed into a scan).
    compiled = Warehouse(iteration_2_built).root / "dbt/target/compiled/tracehouse/models"
    new_traces = {
        trace_id
        for (trace_id,) in _query(
            iteration_2_built, "select trace_id from stg_lake__traces where iteration = 2"
        )
    }
    assert len(new_traces) == WORLD
    for model in ("slices/int_slices_contextualized", "slices/int_step_windows_resolved",
                  "kernels/int_kernels_classified"):
        sql = (compiled / f"intermediate/{model}.sql").read_text()
        assert set(re.findall(r"'([0-9a-f]{16})'", sql)) == new_traces, model
        assert "select distinct done.trace_id" not in sql, model  # no subquery form
    # The models scanning the lake read the new traces' files by name, not
    # the staging views' glob over every file (macros/lake_scan.sql).
    for model, tables in (
        ("slices/int_slices_contextualized", ("slices",)),
        ("slices/int_annotation_ranges_nested", ("annotation_ranges",)),
        ("collectives/int_collective_calls_sequenced", ("slices",)),
        ("traces/int_traces_loaded", ("traces",)),
    ):
        sql = (compiled / f"intermediate/{model}.sql").read_text()
        for table in tables:
            named = re.findall(rf"/{table}/run={RUN}/([0-9a-f]{{16}})\.parquet'", sql)
            assert set(named) == new_traces, (model, table)
            assert f"stg_lake__{table}" not in sql, (model, table)


def test_incremental_run_inserts_the_new_traces_without_a_temporary_table(
    iteration_2_built: Path,
) -> None:
    # A per-trace model's incremental run inserts its query's rows straight
    # into the table (macros/materializations/per_trace.sql), not
    # through dbt-duckdb's temporary table, delete and copy; rows equal to a
    # full refresh are checked by test_adding_an_iteration_matches_full_refresh...
    executed = Warehouse(iteration_2_built).root / "dbt/target/run/tracehouse/models/intermediate"
    for model in ("slices/int_step_windows_resolved", "slices/int_slices_contextualized",
                  "kernels/int_kernels_classified", "collectives/int_collective_calls_sequenced"):
        sql = (executed / f"{model}.sql").read_text()
        table = model.split("/")[1]
        assert re.match(rf'\s*insert into "[^"]+"\."intermediate"\."{table}" by name\b', sql), model
        assert "__dbt_tmp" not in sql, model


def test_build_log_shows_one_insert_and_cheap_upkeep_per_per_trace_model(
    iteration_2_built: Path,
) -> None:
    # What benchmarks/models.py prints as "SQL by statement kind", read from
    # dbt's debug log of the incremental build: each per-trace model ran one
    # direct insert and one unloaded-trace delete, no temporary table and no
    # delete+insert copy, and looked its pending traces up.
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dbt_statements", project_dir() / "benchmarks" / "dbt_statements.py")
    assert spec is not None and spec.loader is not None
    dbt_statements = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dbt_statements)

    target = Warehouse(iteration_2_built).root / "dbt" / "target"
    manifest = json.loads((target / "manifest.json").read_text())
    results = json.loads((target / "run_results.json").read_text())["results"]
    built = {result["unique_id"] for result in results}
    per_trace = [uid for uid in built if uid in manifest["nodes"]
                 and manifest["nodes"][uid]["config"]["materialized"] == "per_trace"]
    assert len(per_trace) >= 8, per_trace

    seconds = dbt_statements.statement_seconds(
        dbt_statements.read_logs(Warehouse(iteration_2_built).root / "dbt" / "logs"))
    assert seconds["per-trace inserts"][0] == len(per_trace), seconds
    assert seconds["unloaded-trace deletes"][0] == len(per_trace), seconds
    assert seconds["pending-trace lookups"][0] >= len(per_trace), seconds
    assert "temporary tables" not in seconds and "delete+insert" not in seconds, seconds
    assert seconds["model tables and views"][0] > 0, seconds


def test_long_pending_lists_are_a_values_semi_join_or_a_subquery_with_the_same_rows(
    iteration_2_ingested: Path, tmp_path: Path
) -> None:
    # Above var('max_in_list_traces') pending traces the filter is a semi
    # join on a VALUES list (an IN list's cost grows with its length). The
    # two forms, compiled for the same pending traces, select the same rows.
    warehouse = _copy(iteration_2_ingested, tmp_path / "warehouse")
    # int_slices_contextualized reads each trace's iteration from int_traces_loaded,
    # which a build refreshes before it: run that here too, so the compiled SQL
    # below sees the new traces as a build's would.
    assert run_dbt(["run", "--select", "int_traces_loaded"], warehouse) == EXIT_OK
    compiled = Warehouse(warehouse).root / "dbt/target/compiled/tracehouse/models/intermediate"
    models = {"slices/int_annotation_ranges_nested": "annotation_ranges",
              "slices/int_slices_contextualized": "slices"}
    # Above var('max_literal_traces') the list stays a subquery and the lake
    # is read through the staging views: a third form, the same rows.
    forms: dict[str, dict[str, str]] = {}
    for form, vars_ in (("in_list", f"{{max_in_list_traces: {WORLD}}}"),
                        ("values", f"{{max_in_list_traces: {WORLD - 1}}}"),
                        ("query", "{max_literal_traces: 1}")):  # iteration 2: WORLD new traces
        selected = [model.split("/")[1] for model in models]
        assert run_dbt(["compile", "--select", *selected, "--vars", vars_], warehouse) == EXIT_OK
        forms[form] = {model: (compiled / f"{model}.sql").read_text() for model in models}
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        for model, table in models.items():
            in_list, values, query = (forms[form][model] for form in ("in_list", "values", "query"))
            assert "pending_traces" not in in_list and "pending_traces" in values, model
            staging = f"stg_lake__{table}"
            assert staging not in in_list and staging in query, model
            [(rows,)] = con.execute(f"select count(*) from ({in_list})").fetchall()
            assert rows > 0, model
            for left, right in ((in_list, values), (values, in_list),
                                (in_list, query), (query, in_list)):
                [(extra,)] = con.execute(
                    f"select count(*) from (({left}) except all ({right}))"
                ).fetchall()
                assert extra == 0, model
    finally:
        con.close()


def test_changed_trace_is_recomputed_and_unloaded_trace_disappears(
    runs: Runs, iteration_2_built: Path, tmp_path: Path
) -> None:
    warehouse = _copy(iteration_2_built, tmp_path / "warehouse")
    wh = Warehouse(warehouse)
    before = {entry.path: entry for entry in lake.read_manifest(wh)}
    changed = trace_path(runs.main, 0, 1)
    unloaded = trace_path(runs.main, 1, 2)
    old_changed = before[str(changed)].trace_id
    [(old_compute,)] = _query(
        warehouse, "select compute_ns from fct_rank_iterations where rank = 0 and iteration = 1"
    )

    # Same path, other content (the other seed's jitter): ingest replaces it.
    # The run folder is shared by the tests: put the original file back after.
    original = tmp_path / "original_trace"
    shutil.copyfile(changed, original)
    try:
        shutil.copyfile(trace_path(runs.other_seed, 0, 1), changed)
        _ingest([runs.main], warehouse)
    finally:
        shutil.copyfile(original, changed)
    new_changed = {entry.path: entry for entry in lake.read_manifest(wh)}[str(changed)].trace_id
    assert new_changed != old_changed
    lake.remove_trace(wh, RUN, before[str(unloaded)].trace_id)

    _build(warehouse)
    _assert_same_as_full_refresh(warehouse, tmp_path)

    kernels = dict(_query(
        warehouse, "select trace_id, count(*) from intermediate.int_kernels_classified"
        " where trace_id in (?, ?) "
        "group by 1", [old_changed, new_changed],
    ))  # fmt: skip
    assert old_changed not in kernels and kernels[new_changed] > 0
    [(new_compute,)] = _query(
        warehouse, "select compute_ns from fct_rank_iterations where rank = 0 and iteration = 1"
    )
    assert new_compute != old_compute
    gone = _query(warehouse, "select * from fct_rank_iterations where rank = 1 and iteration = 2")
    assert gone == []
    [(ranks,)] = _query(warehouse, "select count(*) from fct_rank_iterations where iteration = 2")
    assert ranks == WORLD - 1


def test_changed_project_refreshes_instead_of_mixing_code(
    iteration_2_built: Path, tmp_path: Path
) -> None:
    """`tracehouse build` after a change of the dbt project rebuilds every incremental table.

    dbt's delete+insert would otherwise keep the old traces' rows computed by
    the old code beside new traces' rows computed by the new. The project is
    copied and one seed pattern edited (GEMM kernels become `memory`); the
    next plain build must reclassify the rows of traces it had already built.
    """
    warehouse = _copy(iteration_2_built, tmp_path / "warehouse")
    _build_plain(warehouse)  # records the fingerprint of the project as it is
    project = _project_copy(tmp_path / "project")
    patterns = project / "seeds" / "kernel_kind_patterns.csv"
    patterns.write_text(patterns.read_text().rstrip("\n")
                        + "\ngemm,5,memory,name,(?i)gemm,test: GEMMs count as memory\n")
    [(gemms,)] = _query(warehouse, "select count(*) from fct_kernels where name ilike '%gemm%'")
    assert gemms > 0
    with _project_at(project):
        assert run_dbt(["build"], warehouse) == EXIT_OK
    [(still_compute,)] = _query(
        warehouse, "select count(*) from intermediate.int_kernels_classified"
        " where name ilike '%gemm%' and kind <> 'memory'")
    assert still_compute == 0


def test_changed_model_rebuilds_its_per_trace_descendants_and_a_description_nothing(
    iteration_2_built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After an edit of one model's SQL and of another's YAML description, `tracehouse
    build` builds whole exactly the per-trace tables of the edited model and of its
    descendants (dbt's state:modified+ against the last build's manifest:
    tracehouse.build.stale); every other per-trace table keeps its rows.

    Every per-trace table is given a comment first: a table built whole (a new
    table swapped in) has none, a table kept (its new traces inserted) keeps it.
    """
    warehouse = _copy(iteration_2_built, tmp_path / "warehouse")
    project = _project_copy(tmp_path / "project")
    with _project_at(project):
        _build_plain(warehouse)  # every model built; the manifest of this project kept
    manifest = json.loads((Warehouse(warehouse).root / "dbt/target/manifest.json").read_text())
    nodes = manifest["nodes"]
    per_trace = {uid: f"{node['schema']}.{node['alias']}" for uid, node in nodes.items()
                 if node["resource_type"] == "model"
                 and node["config"]["materialized"] == "per_trace"}
    edited = "model.tracehouse.int_kernels_classified"
    described = "model.tracehouse.int_traces_loaded"
    # What the edit makes stale: the edited model and every per-trace model below it,
    # walked here on the manifest's child map.
    below, frontier = {edited}, [edited]
    while frontier:
        for child in manifest["child_map"][frontier.pop()]:
            if child not in below and child in nodes:
                below.add(child)
                frontier.append(child)
    expected = {per_trace[uid] for uid in below if uid in per_trace}
    assert 3 <= len(expected) < len(per_trace) - 3, expected
    con = duckdb.connect(str(Warehouse(warehouse).database))
    try:
        for table in per_trace.values():
            con.execute(f"comment on table {table} is 'kept'")
    finally:
        con.close()

    model_sql = project / "models/intermediate/kernels/int_kernels_classified.sql"
    model_sql.write_text(model_sql.read_text() + "\n-- edited: the SQL changed\n")
    yaml_file = project / "models/intermediate/traces/_int_traces__models.yml"
    text, description = yaml_file.read_text(), "      Per trace (materialized per_trace"
    assert description in text
    yaml_file.write_text(text.replace(description, "      Edited. " + description.lstrip(), 1))
    capsys.readouterr()
    with _project_at(project):
        _build_plain(warehouse)
    out = capsys.readouterr().out
    assert "rebuilding every per-trace table" not in out, out
    assert f"rebuilding {len(expected)} table(s) it made stale" in out, out

    comments = dict(_query(warehouse, "select schema_name || '.' || table_name, comment"
                                      " from duckdb_tables()"))
    kept = {table for table in per_trace.values() if comments[table] == "kept"}
    rebuilt = set(per_trace.values()) - kept
    assert rebuilt == expected, (rebuilt ^ expected)
    assert per_trace[described] in kept and per_trace[edited] in rebuilt
    # (The edit is a comment: the chain still equals a full refresh of the project.)
    _assert_same_as_full_refresh(warehouse, tmp_path)


def test_changed_topology_recomputes_the_runs_kernels(
    runs: Runs, iteration_2_built: Path, tmp_path: Path
) -> None:
    """A new topology file renumbers the run's tp and dp groups: no trace changed, yet the
    communication group index of the run's kernels (int_kernels_phased, from
    dim_process_groups) must follow, in every trace.
    """
    warehouse = _copy(iteration_2_built, tmp_path / "warehouse")
    group_indexes = (
        "select trace_id, slice_id, comm_group_index from fct_kernels"
        " where comm_process_group_kind in ('tp', 'dp')"
    )
    before = {(trace, slice_): index for trace, slice_, index in _query(warehouse, group_indexes)}
    assert before

    # The run folder is shared by the tests: put the original file back after.
    topology = runs.main / "topology.json"
    original = topology.read_text()
    layout = json.loads(original)
    for kind in ("tp", "dp"):
        layout["groups"][kind] = layout["groups"][kind][::-1]
    try:
        topology.write_text(json.dumps(layout, indent=1) + "\n")
        _ingest([runs.main], warehouse)
    finally:
        topology.write_text(original)

    _build(warehouse)
    _assert_same_as_full_refresh(warehouse, tmp_path)
    after = {(trace, slice_): index for trace, slice_, index in _query(warehouse, group_indexes)}
    assert after.keys() == before.keys()
    renumbered = {
        trace for (trace, slice_), index in after.items() if before[trace, slice_] != index
    }
    traces = {trace for trace, _ in before}
    assert renumbered == traces


def test_plain_build_narrows_to_what_reads_the_changed_lake_tables(
    runs: Runs, iteration_2_built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a plain build, the next plain build of the same warehouse builds only the
    models (and tests) downstream of the lake tables whose files changed
    (tracehouse.build.state.changed_lake_tables): here only the topology file
    changes, so seeds, staging views and every model that reads no topology are
    left as they are, yet the run's kernels take the new group numbering and
    the chain equals a full refresh.
    """
    warehouse = _copy(iteration_2_built, tmp_path / "warehouse")
    _build_plain(warehouse)  # a copy is a new location: builds everything, records its tables
    # The Nsight models name the Nsight traces at run time: on this Kineto-only
    # warehouse, none, so they read no lake file at all (the kernel args scan is
    # int_kernel_short_names_extracted's, which fct_kernels joins).
    nsys = (Warehouse(warehouse).root / "dbt/target/compiled/tracehouse/models/intermediate"
            / "kernels" / "int_kernel_short_names_extracted.sql").read_text()
    assert re.search(r"category = 'kernel'\s+and false\b", nsys), nsys[:2000]
    topology = runs.main / "topology.json"
    original = topology.read_text()
    layout = json.loads(original)
    layout["groups"]["tp"] = layout["groups"]["tp"][::-1]
    try:
        topology.write_text(json.dumps(layout, indent=1) + "\n")
        _ingest([runs.main], warehouse)
    finally:
        topology.write_text(original)
    capsys.readouterr()

    _build_plain(warehouse)
    out = capsys.readouterr().out
    assert "lake tables changed since the last build: topology_groups;" in out, out
    results = json.loads((Warehouse(warehouse).root / "dbt/target/run_results.json").read_text())
    ran = {result["unique_id"] for result in results["results"]}
    assert "model.tracehouse.fct_kernels" in ran
    assert "model.tracehouse.dim_process_groups" in ran
    left_alone = {"seed.tracehouse.kernel_kind_patterns", "model.tracehouse.stg_lake__slices",
                  "model.tracehouse.stg_lake__topology_groups",
                  "model.tracehouse.int_slices_contextualized",
                  "model.tracehouse.int_kernels_classified"}
    assert not ran & left_alone, ran & left_alone
    _assert_same_as_full_refresh(warehouse, tmp_path)
