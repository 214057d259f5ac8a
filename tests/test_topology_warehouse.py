"""Topology in the warehouse: topology files → topology_groups → dim_process_groups, dim_ranks.

The real megatron-core runs in ``../shared/data/kineto/megatron_cpu`` are
ingested twice into one warehouse: the whole run folder (its
``topology.json`` lands in ``topology_groups``) and its traces alone under
another run name (so the groups can only come from the traces'
``distributedInfo.pg_config``). After ``dbt build`` both runs must hold the
same groups, equal to the ``topology.json`` megatron-core wrote, and the
same rank coordinates. Also: Megatron-TraceViz's text file, conflicting
sources (a warning naming both), a bad topology file (an error line and an
``ingest_errors`` row, the traces still land) and a simulated run.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.core.topology import build_topology
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.lake import error_file
from tracehouse.ingest.runner import ingest_paths
from tracehouse.megatron_patch.topology_dump import format_traceviz_txt

pytestmark = pytest.mark.slow

MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu"
RUNS = ("tp2_pp2_dp2", "tp1_pp4_dp2", "tp2_pp2_dp1_vpp2")
#: Kinds whose groups pg_config can give (the gloo twins, too).
SELECT = ["--select", "+dim_ranks", "+dim_process_groups", "stg_lake__topology_groups"]


def _groups(warehouse: Path, run_id: str) -> dict[str, list[list[int]]]:
    rows = query_warehouse(
        warehouse, "select group_kind, ranks from dim_process_groups where run_id = ? "
        "order by group_kind, group_index", [run_id])
    groups: dict[str, list[list[int]]] = {}
    for kind, ranks in rows:
        groups.setdefault(kind, []).append(list(ranks))
    return groups


def _sources(warehouse: Path, run_id: str) -> set[str]:
    return {row[0] for row in query_warehouse(
        warehouse, "select distinct source from dim_process_groups where run_id = ?", [run_id])}


@pytest.fixture(scope="module")
def megatron_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each real run twice: with its topology.json, and its traces alone (`<run>_traces`)."""
    root = tmp_path_factory.mktemp("topology") / "warehouse"
    stream = io.StringIO()
    first = ingest_paths([MEGATRON_CPU / run for run in RUNS], warehouse=root, jobs=4,
                         progress=False, stream=stream)
    assert not first.failed, stream.getvalue()
    assert sorted(run for _, run, _ in first.topologies) == sorted(RUNS)
    for run in RUNS:
        traces_only = ingest_paths(sorted((MEGATRON_CPU / run).glob("iteration_*")),
                                   warehouse=root, run=f"{run}_traces", jobs=4,
                                   progress=False, stream=stream)
        assert not traces_only.failed and not traces_only.topologies, stream.getvalue()
    assert run_dbt(["build", *SELECT], root) == EXIT_OK
    return root


@pytest.mark.parametrize("run", RUNS)
def test_topology_json_lands_in_the_warehouse(megatron_warehouse: Path, run: str) -> None:
    reference = json.loads((MEGATRON_CPU / run / "topology.json").read_text())
    groups = _groups(megatron_warehouse, run)
    for kind, expected in reference["groups"].items():
        assert groups[kind] == expected, kind
    assert groups["model_replica"] == reference["replicas"]
    assert groups["world"] == [list(range(reference["sizes"]["world"]))]
    by_kind = dict(query_warehouse(megatron_warehouse, "select distinct group_kind, source from "
                                   "dim_process_groups where run_id = ?", [run]))
    assert {by_kind[kind] for kind in reference["groups"]} == {"topology_json"}
    # Kinds this dump leaves out (e.g. tp_dp_cp) come from the traces' pg_config.
    assert set(by_kind.values()) <= {"topology_json", "pg_config"}


@pytest.mark.parametrize("run", RUNS)
def test_groups_from_pg_config_equal_the_topology_json(megatron_warehouse: Path,
                                                       run: str) -> None:
    reference = json.loads((MEGATRON_CPU / run / "topology.json").read_text())
    from_traces = _groups(megatron_warehouse, f"{run}_traces")
    assert _sources(megatron_warehouse, f"{run}_traces") == {"pg_config"}
    for kind, expected in reference["groups"].items():
        # Same groups in the same (Megatron's creation) order; torch sorts ranks.
        assert from_traces[kind] == [sorted(g) for g in expected], kind
    # pg_name and pg_desc agree between the dump and the traces.
    names = """
        select group_kind, ranks_key, pg_name, pg_desc from dim_process_groups
        where run_id = ? and group_kind != 'model_replica' order by all
    """
    kinds = {*reference["groups"], "world"}
    dumped, traced = (
        [row for row in query_warehouse(megatron_warehouse, names, [run_id]) if row[0] in kinds]
        for run_id in (run, f"{run}_traces")
    )
    assert dumped == traced


@pytest.mark.parametrize("run", RUNS)
def test_rank_coordinates_equal_megatrons(megatron_warehouse: Path, run: str) -> None:
    reference = json.loads((MEGATRON_CPU / run / "topology.json").read_text())
    columns = "rank, tp_rank, cp_rank, dp_rank, pp_rank, ep_rank, etp_rank, edp_rank"
    for run_id in (run, f"{run}_traces"):
        rows = query_warehouse(
            megatron_warehouse,
            f"select {columns} from dim_ranks where run_id = ? order by rank", [run_id])
        assert len(rows) == reference["sizes"]["world"]
        for rank, tp, cp, dp, pp, ep, etp, edp in rows:
            coords = reference["ranks"][str(rank)]
            assert (tp, cp, dp, pp) == (coords["tp"], coords["cp"], coords["dp"], coords["pp"])
            for name, value in (("ep", ep), ("etp", etp), ("edp", edp)):
                if name in coords:
                    assert value == coords[name], (rank, name)
    stages = query_warehouse(
        megatron_warehouse, "select rank, pp_stage, is_first_stage, is_last_stage, "
        "model_replica, host_name, has_trace from dim_ranks where run_id = ? "
        "order by rank", [run])
    pp = reference["sizes"]["pp"]
    replica_of = {r: i for i, group in enumerate(reference["replicas"]) for r in group}
    for rank, stage, first, last, replica, host, has_trace in stages:
        assert (first, last) == (stage == 0, stage == pp - 1)
        assert replica == replica_of[rank]
        assert host is not None and has_trace


def test_traceviz_text_and_conflicts(tmp_path: Path) -> None:
    """TraceViz's text file is read; a wrong topology.json is reported next to pg_config."""
    run = MEGATRON_CPU / "tp2_pp2_dp2"
    root = tmp_path / "warehouse"
    txt = tmp_path / "unique_parallel_groups_20260105_143520.txt"
    txt.write_text(format_traceviz_txt(build_topology(8, tp=2, pp=2)))
    wrong = tmp_path / "wrong" / "topology.json"
    wrong.parent.mkdir()
    wrong.write_text(json.dumps(build_topology(8, tp=2, pp=2, order="tp-pp-dp")))
    iterations = sorted(run.glob("iteration_*"))
    stream = io.StringIO()
    result = ingest_paths([*iterations, txt], warehouse=root, run="viz", jobs=4,
                          progress=False, stream=stream)
    assert not result.failed and [t[1] for t in result.topologies] == ["viz"], stream.getvalue()
    # A file named explicitly is taken as a trace: give the folder holding topology.json.
    result = ingest_paths([*iterations, wrong.parent], warehouse=root, run="wrong",
                          progress=False, stream=stream)
    assert [t[1] for t in result.topologies] == ["wrong"]
    assert run_dbt(["build", *SELECT], root) == EXIT_OK  # conflicts warn, never fail
    results = json.loads((root / "dbt" / "target" / "run_results.json").read_text())["results"]
    [agree] = [r for r in results if r["unique_id"].startswith("test.tracehouse."
                                                               "topology_sources_agree")]
    assert agree["status"] == "warn"

    viz = _groups(root, "viz")
    reference = build_topology(8, tp=2, pp=2)["groups"]
    for kind in ("tp", "pp", "dp", "model_replica"):
        assert viz[kind] == reference[kind], kind
    rows = query_warehouse(
        root, "select group_kind, source, conflicting_sources from dim_process_groups "
        "where run_id = 'viz' order by all")
    assert {(kind, source) for kind, source, _ in rows if kind in ("tp", "pp", "dp")} == {
        ("tp", "traceviz_txt"), ("pp", "traceviz_txt"), ("dp", "traceviz_txt")}
    assert ("cp", "pg_config") in {(kind, source) for kind, source, _ in rows}
    assert all(conflict is None for _, _, conflict in rows)

    conflicts = query_warehouse(root, "select group_kind, ranks_key, conflicting_sources from "
                                "dim_process_groups where run_id = 'wrong' and conflicting_sources "
                                "is not null order by all")
    assert {kind for kind, _, _ in conflicts} >= {"pp", "dp"}
    pp = next(c for k, key, c in conflicts if k == "pp" and key == "0,2")
    assert "pg_config (traces) has [0,4]" in pp.split("; ")


def test_bad_topology_file_is_an_error_and_traces_still_land(tmp_path: Path) -> None:
    job = tmp_path / "job"
    iteration = job / "iteration_3"
    iteration.mkdir(parents=True)
    for trace in sorted((MEGATRON_CPU / "tp2_pp2_dp1_vpp2" / "iteration_3").iterdir()):
        (iteration / trace.name).write_bytes(trace.read_bytes())
    (job / "topology.json").write_text('{"sizes": {"world": 4}, "groups": {"tp": [[0, 9]]}}')
    (job / "unique_parallel_groups_1.txt").write_text("TP Size: 2\nnothing else\n")
    root = tmp_path / "warehouse"
    stream = io.StringIO()
    result = ingest_paths([job], warehouse=root, progress=False, stream=stream)
    assert len(result.loaded) == 4 and result.exit_code == 1
    assert sorted(Path(f.path).name for f in result.failed) == [
        "topology.json", "unique_parallel_groups_1.txt"]
    out = stream.getvalue()
    assert f"error: {job / 'topology.json'}: groups.tp holds rank 9, but sizes.world is 4" in out
    assert "no 'Group N: [ranks]' lines" in out
    con = duckdb.connect()
    errors = con.execute(
        "select error_kind, count(*) from read_parquet(?) group by all",
        [str(Warehouse(root).table_dir("ingest_errors") / "run=job" / "*.parquet")],
    ).fetchall()
    assert errors == [("invalid_topology", 2)]
    assert not list(Warehouse(root).table_dir("topology_groups").glob("run=*/*.parquet"))
    # Fixed: the error rows go, the topology lands.
    (job / "topology.json").write_text(json.dumps(build_topology(4, tp=2, pp=2, vpp=2)))
    (job / "unique_parallel_groups_1.txt").unlink()
    again = ingest_paths([job], warehouse=root, progress=False, stream=stream)
    assert again.exit_code == 0 and [t[1] for t in again.topologies] == ["job"]
    assert not error_file(Warehouse(root), "job", str(job / "topology.json")).exists()


def test_simulated_run_pg_config_equals_its_topology(tmp_path: Path) -> None:
    from tracehouse.simulate import SimConfig, simulate_run

    config = SimConfig(tp=2, pp=2, dp=2, cp=1, ep=1, etp=None, vpp=1, microbatches=2,
                       iterations=1, schedule="1f1b", layers=4, hidden=256, heads=4,
                       seq_length=128)
    run = simulate_run(config, tmp_path / "sim", jobs=2, progress=False)
    root = tmp_path / "warehouse"
    stream = io.StringIO()
    ingest_paths([run.out_dir], warehouse=root, run="sim", jobs=4, progress=False,
                 stream=stream)
    ingest_paths(sorted(run.out_dir.glob("iteration_*")), warehouse=root, run="sim_traces",
                 jobs=4, progress=False, stream=stream)
    assert run_dbt(["build", *SELECT], root) == EXIT_OK
    reference = json.loads(run.topology_path.read_text())["groups"]
    dumped, traced = _groups(root, "sim"), _groups(root, "sim_traces")
    for kind in ("tp", "pp", "dp", "cp", "mp", "ep", "edp", "embedding"):
        assert dumped[kind] == reference[kind], kind
        assert traced[kind] == [sorted(g) for g in reference[kind]], kind


def test_unchanged_topology_is_skipped_and_the_build_stays_up_to_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topology file loads once, like a trace: the second identical ingest skips it,
    so the next build has nothing to do; and a first ingest counts it once."""
    from tracehouse.cli import main

    job = tmp_path / "job"
    iteration = job / "iteration_3"
    iteration.mkdir(parents=True)
    source = MEGATRON_CPU / "tp2_pp2_dp1_vpp2"
    for trace in sorted((source / "iteration_3").iterdir()):
        (iteration / trace.name).write_bytes(trace.read_bytes())
    (job / "topology.json").write_bytes((source / "topology.json").read_bytes())
    root = str(tmp_path / "warehouse")

    assert main(["ingest", str(job), "--warehouse", root, "-q"]) == 0
    assert "4 trace(s)" in (first := capsys.readouterr().err)
    assert "1 topology file(s)" in first and "skipped 0," in first
    assert main(["build", "--warehouse", root]) == 0
    capsys.readouterr()

    assert main(["ingest", str(job), "--warehouse", root, "-q"]) == 0
    second = capsys.readouterr().err
    assert "loaded 0 trace(s)" in second and "0 topology file(s)" in second
    assert "skipped 5," in second
    assert main(["build", "--warehouse", root]) == 0
    assert "is up to date" in capsys.readouterr().out

    # Touched, same bytes: read, found equal, skipped; changed: reloaded.
    topology = job / "topology.json"
    topology.write_bytes(topology.read_bytes())
    assert main(["ingest", str(job), "--warehouse", root, "-q"]) == 0
    assert "0 topology file(s)" in capsys.readouterr().err
    topology.write_text(json.dumps(build_topology(4, tp=2, pp=2, vpp=2)))
    assert main(["ingest", str(job), "--warehouse", root, "-q"]) == 0
    assert "1 topology file(s)" in capsys.readouterr().err
