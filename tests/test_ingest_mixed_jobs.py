"""A folder holding traces of more than one job, and the errors left behind (issue 29).

``single_rank/`` holds a world-2 trace (the A100 one) and two ranks of a
128-rank job. A new run must not take whichever job's file sorts first:
the run is refused whole, every trace naming each job's files and the
``--run`` that loads it, whatever the file order or the number of workers
(item 7). Following the hint loads them, and their ``ingest_errors`` rows go
with that load (item 8).
"""

from __future__ import annotations

import io
import shlex
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


def _hint_command(hint: str) -> list[str]:
    """The ``tracehouse ingest … --run NAME`` command a hint gives, as argv."""
    start = hint.index("tracehouse ingest ")
    return shlex.split(hint[start:].split(";")[0].split(" (")[0])


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_new_run_of_two_jobs_is_refused_whole_whatever_the_file_order(
        tmp_path: Path, jobs: int) -> None:
    """Item 7: neither job claims the run, the same way in either file order."""
    orders = {
        # the 2-rank job's file sorts first, as in ../shared/data
        "a_first": {A100: "a100.json.gz", SAMPLED[0]: "b-rank-0.json.gz",
                    SAMPLED[1]: "b-rank-1.json.gz"},
        # the 128-rank job's files sort first
        "b_first": {A100: "z100.json.gz", SAMPLED[0]: "b-rank-0.json.gz",
                    SAMPLED[1]: "b-rank-1.json.gz"},
    }
    outcomes = {}
    for order, names in orders.items():
        folder = _copy(tmp_path / order / "job", names)
        warehouse = tmp_path / order / "wh"
        stream = io.StringIO()
        result = ingest_paths([folder], warehouse, jobs=jobs, stream=stream)
        assert result.loaded == []
        assert _read(warehouse, "traces", "path") == []
        failed = {Path(f.path).name: f for f in result.failed}
        assert set(failed) == set(names.values())
        a100 = names[A100]
        for name, f in failed.items():
            assert f.kind == "mixed_jobs"
            assert "2 jobs" in f.message, f.message
            # each job named with its files, in the same words on every line
            assert f"world size 2 ({folder / a100})" in f.message, f.message
            assert (f"world size 128 ({folder / 'b-rank-0.json.gz'}, "
                    f"{folder / 'b-rank-1.json.gz'})") in f.message, f.message
            world = 2 if name == a100 else 128
            assert f"--run job-world{world}" in f.hint, f.hint
        assert len({f.message for f in failed.values()}) == 1
        assert stream.getvalue().count("error: ") == 3
        outcomes[order] = sorted(
            (f.kind, f.hint.replace(str(folder), "FOLDER").replace(a100, "A100"))
            for f in failed.values())
        # the errors are recorded, one per file, in the folder's run
        assert [r[0] for r in _read(warehouse, "ingest_errors", "error_kind")] == [
            "mixed_jobs"] * 3
    assert outcomes["a_first"] == outcomes["b_first"]


def test_following_the_hints_loads_each_job_and_clears_its_errors(tmp_path: Path) -> None:
    """Items 7 and 8: each hint's command loads its job into its own run; the
    ``ingest_errors`` rows of the files that loaded are gone with the load."""
    folder = _copy(tmp_path / "job", {A100: A100.name, **{p: p.name for p in SAMPLED}})
    warehouse = tmp_path / "wh"
    first = ingest_paths([folder], warehouse, progress=False)
    assert len(first.failed) == 3
    commands = {tuple(_hint_command(f.hint)) for f in first.failed}
    assert len(commands) == 2  # one per job
    for argv in sorted(commands):
        assert argv[:2] == ("tracehouse", "ingest") and argv[-2] == "--run"
        files = [Path(a) for a in argv[2:-2]]
        result = ingest_paths(files, warehouse, run=argv[-1], progress=False)
        assert result.failed == [] and len(result.loaded) == len(files)
    assert _read(warehouse, "traces", "run_id, rank") == [
        ("job-world128", 0), ("job-world128", 1), ("job-world2", 0)]
    assert _read(warehouse, "ingest_errors", "path") == []


def test_a_run_that_holds_a_job_keeps_it(tmp_path: Path) -> None:
    """A run the lake already holds a job in keeps that job, in whichever order
    the next files come: the other job's files are refused, naming the run's."""
    folder = _copy(tmp_path / "job", {A100: A100.name, **{p: p.name for p in SAMPLED}})
    warehouse = tmp_path / "wh"
    ingest_paths([folder / SAMPLED[1].name], warehouse, run="job", progress=False)
    again = ingest_paths([folder], warehouse, progress=False, jobs=2)
    assert [Path(loaded.path).name for loaded in again.loaded] == [SAMPLED[0].name]
    [failed] = again.failed
    assert failed.kind == "mixed_jobs" and Path(failed.path).name == A100.name
    assert "world size 2" in failed.message and "world size 128" in failed.message
    assert str(folder / SAMPLED[1].name) in failed.message
    assert "--run job-world2" in failed.hint


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
    from tracehouse.core.topology import build_topology
    from tracehouse.core.topology_files import topology_json

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
