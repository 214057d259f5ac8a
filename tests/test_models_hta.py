"""Core marts cross-checked with Holistic Trace Analysis on real traces.

Every shared Kineto trace set with GPU kernels is a run of the session's
reference warehouse (conftest: ingested and built once, beside other runs,
so every query keeps to these sets). ``fct_rank_iterations`` summed
over iterations per rank is compared with HTA 0.6.1's ``get_comm_comp_overlap``
and ``get_temporal_breakdown`` stored in ``../shared/data/reference/hta``
(computed with ``include_last_profiler_step=True``).

One difference is on purpose and tested both ways: HTA rounds ns-resolution
traces inward to whole microseconds (start up, end down); tracehouse keeps ns
by default, and reproduces HTA with ``--vars '{kernel_time_unit_ns: 1000}'``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_DATA, ReferenceWarehouse, copy_warehouse, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt

pytestmark = pytest.mark.slow

REFERENCE = SHARED_DATA / "reference" / "hta"
#: Trace sets (runs of the reference warehouse), named as the HTA reference files.
SETS = ("dlrm_8rank", "a100_nccl_pg_args", "sampled_128rank_job_rank-0",
        "sampled_128rank_job_rank-1")
#: Acceptance tolerances (issue 5): overlap in percentage points, compute relative.
OVERLAP_PP = 1.0
COMPUTE_REL = 0.01
#: Sets whose timestamps have sub-microsecond digits, where HTA's rounding shows.
NS_RESOLUTION = {"a100_nccl_pg_args"}
#: The bound parameter of every query: these sets only.
OURS = [list(SETS)]

PER_RANK = """
    select
        run_id,
        rank,
        sum(compute_ns) / 1000.0 as compute_us,
        100.0 * sum(overlap_ns) / sum(communication_ns) as overlap_pctg,
        sum(idle_ns) / 1000.0 as idle_us,
        count(*) as iterations
    from fct_rank_iterations
    where list_contains(?, run_id)
    group by run_id, rank
    order by run_id, rank
"""


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


@pytest.fixture
def warehouse(reference_warehouse: ReferenceWarehouse) -> Path:
    """The reference warehouse, built with the defaults (ns)."""
    return reference_warehouse.root


@pytest.fixture(scope="module")
def warehouse_us(reference_warehouse: ReferenceWarehouse,
                 tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the warehouse with the interval models rebuilt at HTA's 1 us resolution."""
    root = copy_warehouse(reference_warehouse.root,
                          tmp_path_factory.mktemp("hta_us") / "warehouse")
    args = ["run", "--select", "+fct_rank_iterations", "--vars", "{kernel_time_unit_ns: 1000}"]
    assert run_dbt(args, root) == EXIT_OK
    return root


def _compare(warehouse: Path) -> list[tuple[str, int, float, float, float, float]]:
    """(set, rank, ours compute us, HTA compute us, ours overlap %, HTA overlap %)."""
    reference = _reference()
    rows = query_warehouse(warehouse, PER_RANK, OURS)
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
    for run, rank, _c, _o, idle_us, iterations in query_warehouse(warehouse, PER_RANK, OURS):
        if run == "dlrm_8rank" and iterations == 1:
            assert idle_us == pytest.approx(reference[(run, rank)]["idle_us"], rel=COMPUTE_REL)


def test_every_kernel_is_counted_once(warehouse: Path) -> None:
    """Kernels outside every ProfilerStep keep a NULL iteration and are still counted."""
    [(in_lake, in_marts, outside)] = query_warehouse(
        warehouse,
        """
        select
            (select count(*) from stg_lake__slices
             where category in ('kernel', 'gpu_memcpy', 'gpu_memset')
                 and list_contains($1, run_id)),
            (select sum(kernel_count) from fct_rank_iterations where list_contains($1, run_id)),
            (select count(*) from fct_kernels
             where iteration is null and list_contains($1, run_id))
        """,
        OURS,
    )
    assert in_lake == in_marts
    # dlrm ranks 1 and 3 have 64 kernels each without a launch in the step.
    assert outside == 128


def test_iterations_are_the_profiler_steps(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        "select run_id, list(distinct iteration order by iteration) from fct_kernels "
        "where iteration is not null and list_contains(?, run_id) group by run_id",
        OURS,
    )
    assert dict(rows) == {
        "dlrm_8rank": [10],
        "a100_nccl_pg_args": [4, 5, 6],
        "sampled_128rank_job_rank-0": [551, 552],
        "sampled_128rank_job_rank-1": [551, 552],
    }


def test_kinds_of_real_kernels(warehouse: Path) -> None:
    rows = dict(
        query_warehouse(
            warehouse,
            """
            select kind, list(distinct category order by category)
            from fct_kernels where list_contains(?, run_id) group by kind
            """,
            OURS,
        )
    )
    assert rows["memory"] == ["gpu_memcpy", "gpu_memset"]
    assert rows["communication"] == ["kernel"]
    [(nccl_not_comm,)] = query_warehouse(
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
    rows = query_warehouse(
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
