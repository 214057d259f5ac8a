"""A folder holding traces of more than one job, and the errors left behind (issue 29).

``single_rank/`` holds a world-2 trace (the A100 one) and two ranks of a
128-rank job. Following the ``--run`` hint loads a refused file, and its
``ingest_errors`` rows go with that load, in every run (item 8).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.runner import ingest_paths

FOLDER = SHARED_DATA / "kineto" / "single_rank"
A100 = FOLDER / "a100_nccl_pg_args.json.gz"
SAMPLED = sorted(FOLDER.glob("sampled_128rank_job_rank-*.json.gz"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not A100.is_file(), reason=f"shared trace {A100} not found")]


def _read(warehouse: Path, table: str, columns: str) -> list[tuple]:
    glob = str(warehouse / "lake" / table / "**" / "*.parquet")
    with duckdb.connect() as con:
        return sorted(con.execute(
            f"select {columns} from read_parquet(?, union_by_name = true, "
            "hive_partitioning = false)", [glob]).fetchall())


def _copy(folder: Path, names: dict[Path, str]) -> Path:
    folder.mkdir(parents=True)
    for source, name in names.items():
        shutil.copy(source, folder / name)
    return folder


def test_a_trace_that_loads_clears_its_error_in_every_run(tmp_path: Path) -> None:
    """Item 8: a file refused in one run and loaded into another (the hint's
    ``--run``) leaves no ``ingest_errors`` row; another file's row stays."""
    folder = _copy(tmp_path / "job", {A100: A100.name, **{p: p.name for p in SAMPLED}})
    warehouse = tmp_path / "wh"
    ingest_paths([folder / A100.name], warehouse, run="job", progress=False)
    refused = ingest_paths([folder], warehouse, progress=False)
    assert sorted(Path(f.path).name for f in refused.failed) == [p.name for p in SAMPLED]
    assert len(_read(warehouse, "ingest_errors", "path")) == 2
    ingest_paths([folder / SAMPLED[0].name], warehouse, run="job128", progress=False)
    assert _read(warehouse, "ingest_errors", "run_id, path") == [
        ("job", str(folder / SAMPLED[1].name))]


def test_a_side_file_that_loads_clears_its_error_in_every_run(tmp_path: Path) -> None:
    """Item 8, for the files beside traces: a topology file that failed in its
    folder's run and then loads into another leaves no ``ingest_errors`` row."""
    from tracehouse.topology import build_topology
    from tracehouse.topology_files import topology_json

    folder = tmp_path / "job"
    folder.mkdir()
    topology = folder / "topology.json"
    topology.write_text("{")
    warehouse = tmp_path / "wh"
    assert [f.kind for f in ingest_paths([folder], warehouse, progress=False).failed]
    assert _read(warehouse, "ingest_errors", "run_id, path") == [("job", str(topology))]
    topology.write_text(topology_json(build_topology(world=2, tp=2, pp=1)))
    result = ingest_paths([folder], warehouse, run="other", progress=False)
    assert result.failed == [] and len(result.topologies) == 1
    assert _read(warehouse, "ingest_errors", "run_id, path") == []
