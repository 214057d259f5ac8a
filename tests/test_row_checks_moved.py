"""The row checks moved off the lookup-join views still fail on what they guarded.

fct_kernels, fct_kernel_launches and fct_cpu_collectives are views
(macro lookup_join_materialization): a data test on one re-ran its joins
over every kernel (~7 s of a 256 x 2 build, benchmarks/README.md, issue 30).
Their checks now run on the tables the views read
(int_kernels_classified_row_checks, int_cpu_collectives_classified_row_checks)
and on the lookups' own key tests. Here each breakage those view checks
caught is made in a built warehouse: the view shows it (so the old check
would have failed) and the new test fails, naming the rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tracehouse.build.dbt import EXIT_FAILED, EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, simulate_run

pytestmark = pytest.mark.slow

RUN = "checks"
#: Small, but with everything the views join: launches, collectives, vpp-less
#: microbatch steps and process groups.
CONFIG = SimConfig(
    tp=2, pp=2, dp=1, microbatches=2, iterations=1, layers=4, hidden=256, heads=8,
    seq_length=256, vocab=1024,
)  # fmt: skip
TESTS = [
    "int_kernels_classified_row_checks",
    "int_cpu_collectives_classified_row_checks",
    "int_microbatch_steps_chunked",
]
COMPILED = {
    "int_kernels_classified_row_checks":
        "models/intermediate/kernels/_int_kernels__models.yml",
    "int_cpu_collectives_classified_row_checks":
        "models/intermediate/steps/_int_steps__models.yml",
}  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("row_checks")
    run = simulate_run(CONFIG, root / "sim")
    result = ingest_paths([run.out_dir], warehouse=root / "warehouse", run=RUN, progress=False)
    assert not result.failed, result.failed
    assert run_dbt(["build", "--exclude-resource-type", "unit_test"], root / "warehouse") == EXIT_OK
    yield root / "warehouse"


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    row = con.execute(sql).fetchone()
    assert row is not None, sql
    return row


def _key(trace_id: str, slice_id: int) -> str:
    """A row's key as a condition (trace ids are hex digests of our own making)."""
    assert trace_id.isalnum(), trace_id
    return f"trace_id = '{trace_id}' and slice_id = {int(slice_id)}"


def _failed_checks(warehouse: Path, test: str) -> dict[str, int]:
    """The rows_satisfy test's failing checks, from the SQL dbt compiled for it."""
    sql = warehouse / "dbt/target/compiled/tracehouse" / COMPILED[test] / f"{test}.sql"
    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    try:
        return dict(con.execute(sql.read_text()).fetchall())
    finally:
        con.close()


def test_each_breakage_the_view_checks_caught_fails_the_moved_checks(warehouse: Path) -> None:
    assert run_dbt(["test", "--select", *TESTS], warehouse) == EXIT_OK  # intact: all pass

    con = duckdb.connect(str(warehouse / "tracehouse.duckdb"))
    try:
        kernels = "intermediate.int_kernels_classified"
        first, second, third, fourth = (
            _key(trace_id, slice_id)
            for trace_id, slice_id in con.execute(
                f"select trace_id, slice_id from {kernels} "
                "where launch_name = 'cudaLaunchKernel' order by all limit 4"
            ).fetchall()
        )
        # fct_kernels' unique key: a kernel twice.
        con.execute(f"insert into {kernels} select * from {kernels} where {first}")
        # its not_null rank and accepted kind.
        con.execute(f"update {kernels} set rank = null, kind = 'bogus' where {second}")
        # fct_kernel_launches' cpu_duration_ns >= -1 unit (NULL fails): a call
        # ending 5 us before it starts, and a call without end.
        con.execute(f"update {kernels} set launch_end_ns = launch_ts_ns - 5000 where {third}")
        con.execute(f"update {kernels} set launch_end_ns = null where {fourth}")

        collectives = "intermediate.int_cpu_collectives_classified"
        call, other = (
            _key(trace_id, slice_id)
            for trace_id, slice_id in con.execute(
                f"select trace_id, slice_id from {collectives} order by all limit 2"
            ).fetchall()
        )
        # fct_cpu_collectives' key and accepted event_type.
        con.execute(f"insert into {collectives} select * from {collectives} where {call}")
        con.execute(f"update {collectives} set event_type = 'bogus' where {other}")

        # A lookup fct_kernels joins, repeated: the view repeats its kernels.
        chunks = "intermediate.int_microbatch_steps_chunked"
        step = _key(*_one(con, f"select trace_id, slice_id from {chunks} order by all limit 1"))
        con.execute(f"insert into {chunks} select * from {chunks} where {step}")

        # The views show every breakage: their old checks would have failed.
        repeated_kernels = _one(
            con, "select count(*) - count(distinct (trace_id, slice_id)) from main.fct_kernels"
        )[0]
        assert repeated_kernels >= 2  # the inserted kernel, and those of the repeated step
        assert (
            _one(
                con,
                "select count(distinct slice_id) from main.fct_kernels "
                "where rank is null or kind = 'bogus'",
            )[0]
            == 1
        )
        # Both: the early end by 5 units, the missing end as NULL.
        assert (
            _one(
                con,
                "select count(*) from main.fct_kernel_launches "
                "where not coalesce(cpu_duration_ns >= -1000, false)",
            )[0]
            == 2
        )
        assert (
            _one(
                con,
                "select count(*) - count(distinct (trace_id, slice_id)) "
                "from main.fct_cpu_collectives",
            )[0]
            == 1
        )
        assert (
            _one(con, "select count(*) from main.fct_cpu_collectives where event_type = 'bogus'")[0]
            == 1
        )
    finally:
        con.close()

    assert run_dbt(["test", "--select", *TESTS], warehouse) == EXIT_FAILED
    results = json.loads((warehouse / "dbt/target/run_results.json").read_text())["results"]
    failed = {r["unique_id"].split(".")[2] for r in results if r["status"] == "fail"}
    assert {
        "int_kernels_classified_row_checks",
        "int_cpu_collectives_classified_row_checks",
        "unique_combination_int_microbatch_steps_chunked_trace_id__slice_id",
    } <= failed, failed

    assert _failed_checks(warehouse, "int_kernels_classified_row_checks") == {
        "unique (trace_id, slice_id)": 1,
        "rank is not null": 1,
        "kind in (compute, communication, memory)": 1,
        "a runtime launch ends when or after it starts": 2,
    }
    assert _failed_checks(warehouse, "int_cpu_collectives_classified_row_checks") == {
        "unique (trace_id, slice_id)": 1,
        "event_type in (call, wait)": 1,
    }
