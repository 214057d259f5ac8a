"""The model chain as a user meets it: real jobs outside Megatron, plain `dbt run`,
readers during a build, and what `show tables` offers.

* A plain PyTorch 8-GPU job creates several process groups over the same
  ranks, all described `undefined` (as torch does): every mart must build and
  be populated, each group kept apart by its pg name.
* `dbt run --profiles-dir .` right after `tracehouse ingest`, on a warehouse
  that was never built (no seed tables yet), exits 0.
* `tracehouse sql` while `tracehouse build` runs exits 0 and sees the
  previous build's marts (the build writes a copy that is swapped in).
* `show tables` lists staging views and marts, not intermediate tables or seeds.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import REPO_ROOT, SHARED_DATA, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.core.publish import building_database
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"
#: The process groups a plain PyTorch job (DDP + a few helper groups) creates:
#: torch's default group and five more over the same 8 ranks, described
#: `undefined` because nothing named them.
TORCH_GROUPS = [("0", "default_pg")] + [(str(n), "undefined") for n in range(1, 6)]
MARTS_WITH_DATA = [
    "dim_ranks", "dim_process_groups", "fct_kernels", "fct_rank_iterations",
    "fct_kernel_summary", "fct_microbatch_phases",
]  # fmt: skip


def _torch_job(out: Path) -> Path:
    """The real DLRM job, rewritten as recent PyTorch writes a plain job's traces.

    Every trace gets the `pg_config` of the six groups above, and every NCCL
    kernel the process-group args of group "3" (`Process Group Name`,
    `Process Group Ranks`, `Process Group Description` = `undefined`).
    """
    out.mkdir(parents=True)
    ranks = list(range(8))
    for path in sorted(DLRM.glob("*.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        trace["distributedInfo"]["pg_config"] = [
            {"pg_name": name, "pg_desc": desc, "backend_config": "cuda:nccl",
             "pg_size": len(ranks), "ranks": ranks}
            for name, desc in TORCH_GROUPS
        ]  # fmt: skip
        for event in trace["traceEvents"]:
            if event.get("cat") == "kernel" and "nccl" in event.get("name", "").lower():
                event.setdefault("args", {}).update({
                    "Process Group Name": "3", "Process Group Ranks": ranks,
                    "Process Group Description": "undefined", "Group size": len(ranks),
                })  # fmt: skip
        (out / path.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
    return out


@pytest.fixture(scope="module")
def torch_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rewritten job, ingested and built with a plain `tracehouse build`."""
    root = tmp_path_factory.mktemp("torch_job")
    job = _torch_job(root / "b200_style_job")
    warehouse = root / "warehouse"
    result = ingest_paths([job], warehouse=warehouse, progress=False)
    assert not result.failed, result.failed
    assert run_dbt(["build"], warehouse) == EXIT_OK
    return warehouse


def test_groups_over_the_same_ranks_build_every_mart(torch_job: Path) -> None:
    for mart in MARTS_WITH_DATA:
        [(rows,)] = query_warehouse(torch_job, f"select count(*) from {mart}")
        assert rows > 0, f"{mart} is empty"
    groups = query_warehouse(
        torch_job, "select group_kind, kind, pg_name, ranks_key from dim_process_groups"
        " order by group_kind, group_index")
    everyone = ",".join(str(rank) for rank in range(8))
    assert groups == [("other", "other", str(n), everyone) for n in range(1, 6)] + [
        ("world", "world", "0", everyone)
    ]
    # Each NCCL kernel finds its exact group among the five with the same ranks.
    matched = query_warehouse(
        torch_job, "select distinct comm_process_group_kind, dim.pg_name from fct_kernels"
        " inner join dim_process_groups as dim on dim.run_id = fct_kernels.run_id"
        " and dim.group_kind = fct_kernels.comm_process_group_kind"
        " and dim.group_index = fct_kernels.comm_group_index")
    assert matched == [("other", "3")]


def test_dbt_run_on_a_fresh_warehouse(tmp_path: Path) -> None:
    """`dbt run` right after an ingest: no seed tables exist yet, and it still builds."""
    warehouse = tmp_path / "warehouse"
    result = ingest_paths([DLRM], warehouse=warehouse, progress=False)
    assert not result.failed
    env = {**os.environ, "TRACEHOUSE_WAREHOUSE": str(warehouse),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}  # fmt: skip
    dbt = Path(sys.executable).with_name("dbt")
    completed = subprocess.run(
        [str(dbt), "run", "--profiles-dir", ".", "--target-path", str(tmp_path / "target"),
         "--log-path", str(tmp_path / "logs")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "loading missing seed" in completed.stdout
    [(ranks,)] = query_warehouse(warehouse, "select count(distinct rank) from fct_rank_iterations")
    assert ranks == 8


def test_plain_build_loads_seeds_by_hook_and_a_refresh_reloads_them(torch_job: Path) -> None:
    """A plain `tracehouse build` runs no seed node (macros/seeds.sql loads the CSVs
    before the models): its seed tables hold the CSVs' rows, a build that refreshes
    everything (as one after an edited CSV does) loads them again, and the seeds'
    own row checks, left out of the plain build, pass when asked for."""
    results = json.loads(
        (torch_job / "dbt" / "target" / "run_results.json").read_text())["results"]
    assert [r["unique_id"] for r in results if r["unique_id"].startswith("seed.")] == []
    csv_rows = {path.stem: len(path.read_text().splitlines()) - 1
                for path in (REPO_ROOT / "seeds").glob("*.csv")}
    for seed, rows in csv_rows.items():
        [(built,)] = query_warehouse(torch_job, f"select count(*) from seeds.{seed}")
        assert built == rows, seed
    # A seed table that no longer matches its CSV (an edited CSV before the
    # rebuild) is loaded again by a run that refreshes everything.
    con = duckdb.connect(str(Warehouse(torch_job).database))
    try:
        con.execute("delete from seeds.kernel_kind_patterns")
    finally:
        con.close()
    assert run_dbt(["run", "--select", "stg_lake__traces", "--full-refresh"], torch_job) == EXIT_OK
    [(reloaded,)] = query_warehouse(torch_job, "select count(*) from seeds.kernel_kind_patterns")
    assert reloaded == csv_rows["kernel_kind_patterns"]
    assert run_dbt(["test", "--select", "resource_type:seed"], torch_job) == EXIT_OK


def test_sql_reads_the_last_build_while_a_build_runs(torch_job: Path, tmp_path: Path) -> None:
    [(kernels_before,)] = query_warehouse(torch_job, "select count(*) from fct_kernels")
    # More traces arrive (the real megatron_cpu tp1_pp4_dp2 run); a full
    # rebuild with every test keeps dbt busy for a while.
    more = SHARED_DATA / "kineto" / "megatron_cpu" / "tp1_pp4_dp2"
    assert not ingest_paths([more], warehouse=torch_job, progress=False).failed
    tracehouse = Path(sys.executable).with_name("tracehouse")
    build = subprocess.Popen(
        [str(tracehouse), "build", "--warehouse", str(torch_job), "--", "build", "--full-refresh"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        copy = building_database(torch_job)
        deadline = time.monotonic() + 120
        while not copy.exists() and build.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert copy.exists(), "the build never started writing its copy"
        read = subprocess.run(
            [str(tracehouse), "sql", "--warehouse", str(torch_job), "--format", "csv",
             "select count(*) as kernels from fct_kernels"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        still_building = build.poll() is None
    finally:
        assert build.wait(timeout=600) == 0
    assert read.returncode == 0, read.stderr
    assert still_building, "the build ended before the reader ran: nothing was shown"
    assert read.stdout.split() == ["kernels", str(kernels_before)]
    # Once published, the new build is what readers see.
    assert not copy.exists()
    [(runs, kernel_runs)] = query_warehouse(
        torch_job, "select count(distinct run_id), count(distinct run_id) filter "
        "(where span_ns is not null) from fct_rank_iterations")
    # The megatron_cpu run is CPU-only: no kernels (no span figures), but it was
    # built and has its CPU-timed steps.
    assert (runs, kernel_runs) == (2, 1)
    [(cpu_runs,)] = query_warehouse(torch_job, "select count(distinct run_id) from fct_cpu_steps")
    assert cpu_runs == 1


def test_show_tables_lists_staging_views_and_marts_only(torch_job: Path) -> None:
    names = [row[0] for row in query_warehouse(torch_job, "show tables")]
    assert names and all(name.startswith(("stg_lake__", "fct_", "dim_")) for name in names), names
    assert "fct_kernels" in names and "stg_lake__slices" in names


def test_plain_build_with_nothing_changed_is_skipped(
    torch_job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither the project nor the lake changed since the last build: nothing runs."""
    assert run_dbt(["build"], torch_job) == EXIT_OK  # catches up with whatever came before
    published = Warehouse(torch_job).database.stat().st_mtime_ns
    capsys.readouterr()
    assert run_dbt(["build"], torch_job) == EXIT_OK
    assert "is up to date" in capsys.readouterr().out
    assert Warehouse(torch_job).database.stat().st_mtime_ns == published


def test_build_takes_dbt_options_without_a_separator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tracehouse build --full-refresh` reaches dbt (here: an empty warehouse, exit 1),
    instead of being rejected by the command line as before (exit 2)."""
    from tracehouse.cli import main

    assert main(["build", "--warehouse", str(tmp_path / "empty"), "--full-refresh"]) == 1
    assert "no loaded traces" in capsys.readouterr().err
    assert main(["sql", "--warehouse", str(tmp_path / "empty"), "--bogus", "select 1"]) == 2


@pytest.mark.parametrize(("variable", "value"), [
    ("TRACEHOUSE_MEMORY_LIMIT", "lots"),
    ("TRACEHOUSE_MEMORY_LIMIT", "8GB'; drop table x; --"),
    ("TRACEHOUSE_DBT_THREADS", "two"),
    ("TRACEHOUSE_DBT_THREADS", "0"),
])  # fmt: skip
def test_bad_resource_settings_are_named_before_dbt_runs(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert run_dbt(["build"], tmp_path / "warehouse") == 2
    err = capsys.readouterr().err
    assert variable in err and "Traceback" not in err


def test_database_wide_settings_are_set_once_not_on_every_cursor(tmp_path: Path) -> None:
    """dbt-duckdb runs a profile's `settings` on every new cursor, and DuckDB refuses to
    set temp_directory again once a query has spilled into it: a large build that
    spilled then failed on the next model ("Cannot switch temporary directory after the
    current one has been used", 1,024 ranks x 4 iterations). The database-wide settings
    are therefore `config_options`, given once when the database opens; what stays in
    `settings` must be settable on a new cursor after a spill."""
    import duckdb
    import yaml

    profile = yaml.safe_load((REPO_ROOT / "profiles.yml").read_text())
    dev = profile["tracehouse"]["outputs"]["dev"]
    assert {"memory_limit", "temp_directory", "preserve_insertion_order"} <= set(
        dev["config_options"])
    per_cursor = dev.get("settings") or {}
    assert not {"memory_limit", "temp_directory"} & set(per_cursor)

    spill = tmp_path / "spill"
    con = duckdb.connect(str(tmp_path / "db.duckdb"), config={
        "temp_directory": str(spill), "memory_limit": "64MB", "preserve_insertion_order": False})
    con.execute("create table t as select range as a, random() as b from range(6000000)")
    con.execute("create table sorted as select a, b from t order by b")
    assert any(spill.iterdir()), "the sort did not spill: the test proves nothing"
    cursor = con.cursor()
    with pytest.raises(duckdb.Error, match="temporary directory"):
        cursor.execute(f"set temp_directory = '{spill}'")
    for key, value in per_cursor.items():
        con.cursor().execute(f"set {key} = '{value}'")


def test_every_seed_declares_its_column_types() -> None:
    """`dbt run` on a fresh warehouse loads missing seeds from their CSVs with the
    types dbt_project.yml gives (macros/seeds.sql): a seed without them (e.g. one
    renamed in seeds/ but not in dbt_project.yml) fails there with DuckDB's
    "read_csv requires at least a single column". Every CSV's header must be typed."""
    import csv

    import yaml

    config = yaml.safe_load((REPO_ROOT / "dbt_project.yml").read_text())["seeds"]["tracehouse"]
    for path in sorted((REPO_ROOT / "seeds").glob("*.csv")):
        with path.open(newline="") as handle:
            header = next(csv.reader(handle))
        types = (config.get(path.stem) or {}).get("+column_types") or {}
        assert set(header) == set(types), f"{path.name}: dbt_project.yml types {sorted(types)}"
