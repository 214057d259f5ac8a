"""Core marts cross-checked with Holistic Trace Analysis on real traces.

Every shared Kineto trace set with GPU kernels is ingested into one temporary
warehouse (one run per set) and built once. ``fct_rank_iterations`` summed
over iterations per rank is compared with HTA 0.6.1's ``get_comm_comp_overlap``
and ``get_temporal_breakdown`` stored in ``../shared/data/reference/hta``
(computed with ``include_last_profiler_step=True``).

One difference is on purpose and tested both ways: HTA rounds ns-resolution
traces inward to whole microseconds (start up, end down); tracehouse keeps ns
by default, and reproduces HTA with ``--vars '{kernel_time_unit_ns: 1000}'``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA, ingest_and_build
from tracehouse.dbt import EXIT_OK, run_dbt
from tracehouse.warehouse import Warehouse

pytestmark = pytest.mark.slow

KINETO = SHARED_DATA / "kineto"
REFERENCE = SHARED_DATA / "reference" / "hta"
#: Trace set (run name) -> path; the names are those of the reference files.
SETS = {
    "dlrm_8rank": KINETO / "dlrm_8rank",
    "a100_nccl_pg_args": KINETO / "single_rank" / "a100_nccl_pg_args.json.gz",
    "sampled_128rank_job_rank-0": KINETO / "single_rank" / "sampled_128rank_job_rank-0.json.gz",
    "sampled_128rank_job_rank-1": KINETO / "single_rank" / "sampled_128rank_job_rank-1.json.gz",
}
#: Acceptance tolerances (issue 5): overlap in percentage points, compute relative.
OVERLAP_PP = 1.0
COMPUTE_REL = 0.01
#: Sets whose timestamps have sub-microsecond digits, where HTA's rounding shows.
NS_RESOLUTION = {"a100_nccl_pg_args"}

PER_RANK = """
    select
        run_id,
        rank,
        sum(compute_ns) / 1000.0 as compute_us,
        100.0 * sum(overlap_ns) / sum(communication_ns) as overlap_pctg,
        sum(idle_ns) / 1000.0 as idle_us,
        count(*) as iterations
    from fct_rank_iterations
    group by run_id, rank
    order by run_id, rank
"""


def _query(warehouse: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _reference() -> dict[tuple[str, int], dict]:
    """(set, rank) -> {'overlap_pctg', 'compute_us', 'idle_us'} from the HTA files."""
    out: dict[tuple[str, int], dict] = {}
    for name in SETS:
        data = json.loads((REFERENCE / f"{name}.hta.json").read_text())
        for row in data["comm_comp_overlap"]:
            out.setdefault((name, row["rank"]), {})["overlap_pctg"] = row["comp_comm_overlap_pctg"]
        for row in data["temporal_breakdown"]:
            entry = out.setdefault((name, row["rank"]), {})
            entry["compute_us"] = row["compute_time(us)"]
            entry["idle_us"] = row["idle_time(us)"]
    return out


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The four sets ingested (one run each) and built with the defaults (ns)."""
    yield ingest_and_build(SETS, tmp_path_factory.mktemp("hta") / "warehouse")


@pytest.fixture(scope="module")
def warehouse_us(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the warehouse with the interval models rebuilt at HTA's 1 us resolution."""
    root = tmp_path_factory.mktemp("hta_us") / "warehouse"
    shutil.copytree(warehouse, root, ignore=shutil.ignore_patterns("dbt"))
    args = ["run", "--select", "+fct_rank_iterations", "--vars", "{kernel_time_unit_ns: 1000}"]
    assert run_dbt(args, root) == EXIT_OK
    return root


def _compare(warehouse: Path) -> list[tuple[str, int, float, float, float, float]]:
    """(set, rank, ours compute us, HTA compute us, ours overlap %, HTA overlap %)."""
    reference = _reference()
    rows = _query(warehouse, PER_RANK)
    assert {(run, rank) for run, rank, *_ in rows} == set(reference)
    return [
        (
            run,
            rank,
            compute_us,
            reference[(run, rank)]["compute_us"],
            overlap_pctg,
            reference[(run, rank)]["overlap_pctg"],
        )
        for run, rank, compute_us, overlap_pctg, _idle, _n in rows
    ]


def test_us_resolution_matches_hta_on_every_rank(warehouse_us: Path) -> None:
    for run, rank, ours, hta, ours_pct, hta_pct in _compare(warehouse_us):
        assert abs(ours_pct - hta_pct) <= OVERLAP_PP, (run, rank, ours_pct, hta_pct)
        assert abs(ours - hta) <= COMPUTE_REL * hta, (run, rank, ours, hta)


def test_ns_resolution_matches_hta_where_traces_are_whole_microseconds(warehouse: Path) -> None:
    for run, rank, ours, hta, ours_pct, hta_pct in _compare(warehouse):
        assert abs(ours_pct - hta_pct) <= OVERLAP_PP, (run, rank, ours_pct, hta_pct)
        if run in NS_RESOLUTION:
            # HTA's inward rounding drops up to 1 us per kernel: ns compute is
            # larger, by a few percent on ~2,700 short kernels.
            assert hta < ours <= 1.05 * hta, (run, rank, ours, hta)
        else:
            assert abs(ours - hta) <= COMPUTE_REL * hta, (run, rank, ours, hta)


def test_idle_matches_hta_on_single_step_traces(warehouse: Path) -> None:
    """HTA's idle also counts gaps between iterations: compare it on one-step traces only."""
    reference = _reference()
    for run, rank, _c, _o, idle_us, iterations in _query(warehouse, PER_RANK):
        if run == "dlrm_8rank" and iterations == 1:
            assert idle_us == pytest.approx(reference[(run, rank)]["idle_us"], rel=COMPUTE_REL)


def test_every_kernel_is_counted_once(warehouse: Path) -> None:
    """Kernels outside every ProfilerStep keep a NULL iteration and are still counted."""
    [(in_lake, in_marts, outside)] = _query(
        warehouse,
        """
        select
            (select count(*) from stg_lake__slices
             where category in ('kernel', 'gpu_memcpy', 'gpu_memset')),
            (select sum(kernel_count) from fct_rank_iterations),
            (select count(*) from fct_kernels where iteration is null)
        """,
    )
    assert in_lake == in_marts
    # dlrm ranks 1 and 3 have 64 kernels each without a launch in the step.
    assert outside == 128


def test_iterations_are_the_profiler_steps(warehouse: Path) -> None:
    rows = _query(
        warehouse,
        "select run_id, list(distinct iteration order by iteration) from fct_kernels "
        "where iteration is not null group by run_id",
    )
    assert dict(rows) == {
        "dlrm_8rank": [10],
        "a100_nccl_pg_args": [4, 5, 6],
        "sampled_128rank_job_rank-0": [551, 552],
        "sampled_128rank_job_rank-1": [551, 552],
    }


def test_kinds_of_real_kernels(warehouse: Path) -> None:
    rows = dict(
        _query(
            warehouse,
            """
            select kind, list(distinct category order by category)
            from fct_kernels group by kind
            """,
        )
    )
    assert rows["memory"] == ["gpu_memcpy", "gpu_memset"]
    assert rows["communication"] == ["kernel"]
    [(nccl_not_comm,)] = _query(
        warehouse,
        "select count(*) from fct_kernels where name ilike '%nccl%' and kind <> 'communication'",
    )
    assert nccl_not_comm == 0


def print_comparison(warehouse: Path, warehouse_us: Path) -> str:
    """The comparison table as markdown (for notes; not a test)."""
    lines = [
        "| set | rank | compute us (ns / us res.) | HTA | overlap % (ns / us) | HTA |",
        "|---|---|---|---|---|---|",
    ]
    for ns_row, us_row in zip(_compare(warehouse), _compare(warehouse_us), strict=True):
        run, rank, ours, hta, pct, hta_pct = ns_row
        lines.append(
            f"| {run} | {rank} | {ours:.0f} / {us_row[2]:.0f} | {hta:.0f} | "
            f"{pct:.2f} / {us_row[4]:.2f} | {hta_pct:.2f} |"
        )
    return "\n".join(lines)


def test_comm_group_from_process_group_args(warehouse: Path) -> None:
    """a100_nccl_pg_args' NCCL kernels carry Process Group Ranks/Name/Description:
    each is joined to its exact group (the world group the rank's pg_config lists).
    dlrm_8rank's kernels carry none and its traces list no groups, and no Megatron
    step holds them: no group, never a guessed one."""
    rows = _query(
        warehouse,
        """
        select run_id, comm_group_source, comm_process_group_kind, comm_group_index,
               comm_group_kind, count(*)
        from fct_kernels
        where kind = 'communication' and run_id in ('a100_nccl_pg_args', 'dlrm_8rank')
        group by all
        """,
    )
    by_run = {run: rest for run, *rest in rows}
    assert set(by_run) == {"a100_nccl_pg_args", "dlrm_8rank"}
    assert by_run["a100_nccl_pg_args"][:4] == ["process_group", "world", 0, "world"]
    assert by_run["dlrm_8rank"][:4] == [None, None, None, None]
