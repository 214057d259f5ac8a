"""The same models on Spark: the README's "At cluster scale" commands, run as written,
and the marts they build on Spark equal row for row to DuckDB's (but the
what-if marts, which Spark does not build, and the pricing of fct_findings that
they decide on DuckDB: spark_marts.PRICED_BY_REPLAY).

One warehouse serves every test here (one Spark build costs a JVM start and
a second per model, whatever the data): it holds the real ``dlrm_8rank`` job
(ingested first) and the README's tiny simulated run, ingested by the
README's commands (one shard in Spark tasks, one in local processes), then
built by ``tracehouse build`` and ``tracehouse build --target spark``.

The Nsight marts (``fct_nsys_*``) are built on Spark too, but neither run
has Nsight exports, so their equality here is that of empty tables; their
SQL is checked by tests/test_sql_portability.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, SHARED_DATA, query_warehouse
from spark_marts import compare_marts, spark_marts, spark_table_dir
from tracehouse.ingest.shard import shard_of
from tracehouse.simulate.run import trace_path

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"


def _spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec(
            "dbt.adapters.spark") is None:
        return "the spark extra is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None:
        return "no Java on PATH (Spark needs Java 17)"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_spark_missing() is not None, reason=_spark_missing() or ""),
]


def readme_cluster_commands() -> list[str]:
    """The command lines of the README's "At cluster scale" block (a ```sh block)."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## At cluster scale", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```sh\n(.+?)\n```", section, flags=re.S)
    return [line for line in block.splitlines() if line.strip()]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


class ClusterRun:
    """The README's commands, run in a scratch folder; what they printed."""

    def __init__(self, folder: Path, warehouse: Path, outputs: dict[str, str]):
        self.folder = folder
        self.warehouse = warehouse
        self.outputs = outputs


#: The README's simulated run: its folder, its ranks (TP2 x PP2 x DP1), its one iteration.
README_RUN, README_RANKS, README_ITERATION = "cluster_run", range(4), 1


def folder_splitting_the_readme_run(base: Path) -> Path:
    """A new folder under ``base`` in which the README's run has traces in both shards.

    A file's shard is a hash of its resolved path (ingest/shard.py), so in
    one folder of eight all four traces fall into one of the two shards; the
    Spark shard then loads none of them, and the test of its Spark tasks
    would check nothing (CI met such a folder).
    """
    for attempt in range(64):
        folder = (base / f"scratch{attempt}").resolve()
        shards = {
            shard_of(README_RUN, trace_path(folder / README_RUN, rank, README_ITERATION), 2)
            for rank in README_RANKS
        }
        if shards == {0, 1}:
            folder.mkdir()
            return folder
    raise AssertionError(f"no folder under {base} splits the README's run over two shards")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    folder = folder_splitting_the_readme_run(tmp_path_factory.mktemp("cluster"))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("TRACEHOUSE_WAREHOUSE", None)
    outputs: dict[str, str] = {}
    warehouse: Path | None = None
    for line in readme_cluster_commands():
        words = shlex.split(line)
        if words[:2] == ["pip", "install"]:
            continue  # the extra is installed (else the module skips)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value.replace("$PWD", str(folder))
            if name == "TRACEHOUSE_WAREHOUSE":
                warehouse = Path(env[name])
                # The real job first, as its own run, so the builds below cover it too.
                done = _run([str(bin_dir / "tracehouse"), "ingest", str(DLRM), "-q"], folder, env)
                assert done.returncode == 0, done.stderr
            continue
        assert words[0] == "tracehouse", f"unexpected README command: {line}"
        done = _run([str(bin_dir / "tracehouse"), *words[1:]], folder, env)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs[line] = done.stdout + done.stderr
    assert warehouse is not None, "the README block sets TRACEHOUSE_WAREHOUSE"
    return ClusterRun(folder, warehouse, outputs)


def test_readme_block_is_the_documented_flow() -> None:
    commands = " ".join(readme_cluster_commands())
    for step in ("--shard 0/2", "--shard 1/2", "--engine spark", "build --target spark"):
        assert step in commands


def test_readme_commands_build_both_engines(cluster: ClusterRun) -> None:
    assert (cluster.warehouse / "tracehouse.duckdb").is_file()
    built = spark_marts(cluster.warehouse)
    assert {"fct_kernels", "fct_rank_iterations", "dim_ranks"} <= set(built)
    [query] = [line for line in cluster.outputs if " sql " in f" {line} "]
    # The README's query of the Spark mart printed rows of both runs' ranks.
    assert "cluster_run" in cluster.outputs[query]
    assert "(0 rows)" not in cluster.outputs[query]


def test_spark_ingest_shard_loaded_its_files(cluster: ClusterRun) -> None:
    [spark_line] = [line for line in cluster.outputs if "--engine spark" in line]
    assert "in Spark tasks" in cluster.outputs[spark_line]
    ranks = query_warehouse(cluster.warehouse, "select distinct rank from stg_lake__traces "
                            f"where run_id = '{README_RUN}' order by 1")
    assert [rank for (rank,) in ranks] == list(README_RANKS)


def test_marts_equal_on_spark_and_duckdb(cluster: ClusterRun) -> None:
    differences = compare_marts(cluster.warehouse)
    assert not differences, "\n".join(d.line() for d in differences)


def test_findings_priced_directly_on_duckdb_equal_spark(cluster: ClusterRun) -> None:
    """Spark builds no what-if model, so its fct_findings prices every rule by its own
    figure; DuckDB's rows priced that way too (rules without a scenario, iterations the
    replay has no row for) hold the same status, time at stake and severity."""
    files = sorted(str(p) for p in
                   spark_table_dir(cluster.warehouse, "fct_findings").glob("*.parquet"))
    assert files, "no fct_findings on Spark"
    spark = f"read_parquet({files!r})"
    [(spark_pricing,)] = query_warehouse(
        cluster.warehouse, f"select list(distinct priced_by) from {spark}")
    assert spark_pricing == ["direct"]
    [(direct, differing)] = query_warehouse(cluster.warehouse, f"""
        select count(*), count(*) filter (where
            (duck.status, duck.time_at_stake_ns, duck.severity)
            is distinct from (spark.status, spark.time_at_stake_ns, spark.severity))
        from fct_findings as duck
        inner join {spark} as spark using (run_id, iteration, rule_id)
        where duck.priced_by = 'direct'""")
    assert direct > 0 and differing == 0, (direct, differing)


@pytest.mark.parametrize("run_id", ["dlrm_8rank", "cluster_run"])
def test_both_runs_have_rows_on_spark(cluster: ClusterRun, run_id: str) -> None:
    """Equality of empty marts would prove nothing: both runs fill the core marts."""
    for mart in ("fct_kernels", "fct_rank_iterations", "fct_kernel_summary", "dim_ranks"):
        files = sorted(str(p) for p in spark_table_dir(cluster.warehouse, mart).glob("*.parquet"))
        [(rows,)] = query_warehouse(
            cluster.warehouse,
            f"select count(*) from read_parquet({files!r}) where run_id = ?", [run_id])
        assert rows > 0, (mart, run_id)


def test_spark_pipeline_marts_have_the_simulated_pipeline(cluster: ClusterRun) -> None:
    files = sorted(str(p) for p in
                   spark_table_dir(cluster.warehouse, "fct_pipeline_bubbles").glob("*.parquet"))
    [(stages,)] = query_warehouse(
        cluster.warehouse, f"select count(distinct pp_stage) from read_parquet({files!r}) "
        "where run_id = 'cluster_run'") if files else [(0,)]
    assert stages == 2


def test_compare_marts_sees_a_difference(cluster: ClusterRun, tmp_path: Path) -> None:
    """The comparison can fail: a Spark mart with one row dropped is reported, by name."""
    import duckdb

    copy = tmp_path / "warehouse"
    shutil.copytree(cluster.warehouse / "spark" / "warehouse" / "main.db" / "dim_ranks",
                    copy / "spark" / "warehouse" / "main.db" / "dim_ranks")
    shutil.copy(cluster.warehouse / "tracehouse.duckdb", copy / "tracehouse.duckdb")
    folder = copy / "spark" / "warehouse" / "main.db" / "dim_ranks"
    files = sorted(str(p) for p in folder.glob("*.parquet"))
    con = duckdb.connect()
    con.execute(f"copy (select * from read_parquet({files!r}) offset 1) "
                f"to '{folder / 'fewer.parquet'}' (format parquet)")
    con.close()
    for name in files:
        Path(name).unlink()
    [difference] = compare_marts(copy, marts=["dim_ranks"])
    assert difference.mart == "dim_ranks"
    assert difference.spark_rows == difference.duckdb_rows - 1
    assert len(difference.only_in_duckdb) == 1 and "dim_ranks" in difference.line()


def test_spark_build_wrote_its_run_results(cluster: ClusterRun) -> None:
    results = json.loads((cluster.warehouse / "dbt" / "target" / "run_results.json").read_text())
    assert results["args"].get("target") == "spark"
    assert all(r["status"] in ("success", "pass") for r in results["results"])
