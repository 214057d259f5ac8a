"""Distributed marts: collectives matched across ranks, stragglers, clock offsets.

The session's reference warehouse (conftest: one real ingest and build,
shared read-only) holds, among other runs:

* a simulated TP2 x PP2 x DP2 Megatron run with an injected straggler and
  per-node clock skew (two GPUs per node, so TP peers share a clock), whose
  ``ground_truth.json`` says what was injected;
* the real ``dlrm_8rank`` traces (older PyTorch: no process-group args);
* the three real ``megatron_cpu`` runs (gloo, no kernels).

The dbt unit tests in models/intermediate/collectives/_int_collectives__models.yml
cover the attribution and offset arithmetic on hand-made rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import sqlglot

from conftest import ReferenceWarehouse, query_warehouse
from tracehouse.build.dbt import DBT_ARTIFACTS_DIR
from tracehouse.core.warehouse import Warehouse
from tracehouse.reports import stragglers
from tracehouse.reports.base import ChartContext

pytestmark = pytest.mark.slow

SIM = "sim_straggler_skew"
STRAGGLER = 5  # slowed 1.5x (conftest.REFERENCE_SIMULATIONS)
DLRM = "dlrm_8rank"
CPU_RUNS = ("tp2_pp2_dp2", "tp1_pp4_dp2", "tp2_pp2_dp1_vpp2")
#: The models this work adds; they must transpile like the core ones.
MODELS = [
    "int_collective_calls_sequenced",
    "int_collective_members_matched",
    "int_rank_clock_offsets_estimated",
    "int_collective_members_aligned",
    "fct_collectives",
    "fct_collective_ranks",
    "fct_stragglers",
    "dim_rank_clock_offsets",
]


@pytest.fixture
def warehouse(reference_warehouse: ReferenceWarehouse) -> Path:
    return reference_warehouse.root


@pytest.fixture
def truth(reference_warehouse: ReferenceWarehouse) -> dict:
    """What the simulator injected into the straggler run (its ground_truth.json)."""
    return reference_warehouse.truths[SIM]


# --------------------------------------------------------------------------- simulated run


def test_injected_straggler_is_first_every_iteration_and_its_tp_peer_is_not(
        warehouse: Path, truth: dict) -> None:
    by_rank = {row["rank"]: row for row in truth["ranks"]}
    straggler = by_rank[STRAGGLER]
    [peer] = [r for r, row in by_rank.items() if r != STRAGGLER and row["pp"] == straggler["pp"]
              and row["dp"] == straggler["dp"] and row["cp"] == straggler["cp"]]
    rows = query_warehouse(warehouse, "select iteration, rank, straggler_rank, "
                           "compute_vs_stage_median from fct_stragglers where run_id = ?", [SIM])
    firsts = {it: rank for it, rank, order, _ in rows if order == 1}
    assert sorted(firsts) == truth["iterations"]
    assert set(firsts.values()) == {STRAGGLER}
    assert all(rank != peer for rank in firsts.values())
    ratios = {(it, rank): ratio for it, rank, _, ratio in rows}
    for iteration in truth["iterations"]:  # its compute stands out against its stage
        assert ratios[(iteration, STRAGGLER)] > 1.3 > ratios[(iteration, peer)]


def test_injected_clock_skew_is_recovered(warehouse: Path, truth: dict) -> None:
    """offset = reference − rank clock = −skew (node 0 is the reference), within 5 % or 10 µs."""
    offsets = dict(query_warehouse(
        warehouse, "select rank, offset_ns from dim_rank_clock_offsets where run_id = ?", [SIM]))
    modes = {mode for (mode,) in query_warehouse(
        warehouse, "select distinct mode from dim_rank_clock_offsets where run_id = ?", [SIM])}
    assert modes == {"collectives"}
    assert any(row["clock_skew_us"] != 0 for row in truth["ranks"])
    for row in truth["ranks"]:
        expected = -row["clock_skew_us"] * 1000.0
        error = abs(offsets[row["rank"]] - expected)
        assert error <= max(0.05 * abs(expected), 10_000.0), (row["rank"], offsets[row["rank"]])


def test_every_simulated_collective_is_matched_on_its_whole_group(warehouse: Path) -> None:
    [(instances, complete, ambiguous, bases, kernels, members)] = query_warehouse(
        warehouse,
        """
        select count(*), count(*) filter (where is_complete),
               count(*) filter (where is_ambiguous), list(distinct match_basis),
               (select count(*) from fct_kernels where run_id = $run and kind = 'communication'),
               (select count(*) from fct_collective_ranks where run_id = $run)
        from fct_collectives where run_id = $run
        """.replace("$run", "?"), [SIM, SIM, SIM])
    assert instances > 0 and complete == instances and ambiguous == 0
    assert bases == ["process_group"]
    assert members == kernels  # every NCCL kernel is one member


def test_groups_and_members_refer_to_existing_rows(warehouse: Path) -> None:
    """fct_collectives' groups are dim_process_groups keys; every member has its instance.

    Checked here rather than as dbt relationship tests: dbt selects a test
    when any of its parents is selected, so a cross-mart test would break a
    partial build such as `dbt build --select +dim_process_groups`.
    """
    [(unknown_groups, orphans, named)] = query_warehouse(
        warehouse,
        """
        select
            (select count(*) from fct_collectives as c
             where c.process_group_kind is not null and not exists (
                 select 1 from dim_process_groups as g where g.run_id = c.run_id
                 and g.group_kind = c.process_group_kind
                 and g.group_index = c.process_group_index)),
            (select count(*) from fct_collective_ranks as r
             where not exists (select 1 from fct_collectives as c
                               where c.run_id = r.run_id and c.collective_id = r.collective_id)),
            (select count(*) from fct_collectives where process_group_kind is not null)
        """)
    assert (unknown_groups, orphans) == (0, 0) and named > 0


def test_aligned_ends_coincide_and_waits_add_up(warehouse: Path) -> None:
    """After alignment NCCL members end together; waiting caused sums to waiting suffered."""
    [(worst_end_skew, worst_start_skew)] = query_warehouse(
        warehouse, "select max(end_skew_ns) filter (where process_group_kind in ('tp', 'dp_cp')),"
        " max(start_skew_ns) from fct_collectives where run_id = ?", [SIM])
    assert worst_end_skew < 20_000 < worst_start_skew
    rows = query_warehouse(
        warehouse,
        "select collective_id, sum(wait_ns), sum(wait_caused_ns), count(*) "
        "from fct_collective_ranks group by all")
    assert rows
    for collective, waited, caused, members in rows:
        assert abs(waited - caused) <= members, collective


# --------------------------------------------------------------------------- dlrm_8rank


def test_dlrm_every_nccl_kernel_is_matched_on_all_ranks_with_skew_and_busbw(
        warehouse: Path) -> None:
    [(kernels,)] = query_warehouse(
        warehouse, "select count(*) from fct_kernels where run_id = ? and kind = 'communication'",
        [DLRM])
    rows = query_warehouse(
        warehouse, "select op, ranks_expected, ranks_matched, is_complete, start_skew_ns, "
        "busbw_gbps, algbw_gbps, bytes from fct_collectives where run_id = ?", [DLRM])
    assert sum(matched for _, _, matched, *_ in rows) == kernels > 0
    assert all(expected == 8 and complete for _, expected, _, complete, *_ in rows)
    assert all(skew > 0 and busbw > 0 and algbw > 0 and size > 0
               for _, _, _, _, skew, busbw, algbw, size in rows)
    assert {op for op, *_ in rows} == {"alltoall", "allreduce"}  # SendRecv kernels of all_to_all
    factors = {op: busbw / algbw for op, _, _, _, _, busbw, algbw, _ in rows}
    assert factors["allreduce"] == pytest.approx(2 * 7 / 8)
    assert factors["alltoall"] == pytest.approx(7 / 8)


def test_dlrm_names_the_ranks_rank_1_waits_for(warehouse: Path) -> None:
    """Rank 1's long SendRecv (~7.6 ms): the ranks it waited for are 2, 6 and 7 (issue 11)."""
    [(collective, wait)] = query_warehouse(
        warehouse, "select collective_id, wait_ns from fct_collective_ranks "
        "where run_id = ? and rank = 1 order by wait_ns desc limit 1", [DLRM])
    assert wait > 5_000_000
    late = query_warehouse(
        warehouse, "select rank from fct_collective_ranks where run_id = ? and collective_id = ? "
        "order by wait_caused_ns desc limit 3", [DLRM, collective])
    assert {rank for (rank,) in late} == {2, 6, 7}
    # They are the three last to start that kernel on their own GPUs (clocks agree to ~µs).
    starts = query_warehouse(
        warehouse, "select kernels.rank from fct_kernels as kernels inner join "
        "fct_collective_ranks as members using (run_id, trace_id, slice_id) where "
        "members.run_id = ? and "
        "members.collective_id = ? order by kernels.ts_ns desc limit 3", [DLRM, collective])
    assert {rank for (rank,) in starts} == {2, 6, 7}


def test_dlrm_report_section_names_the_late_ranks(warehouse: Path, tmp_path: Path) -> None:
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        charts = stragglers.FAMILY.render(ChartContext(con=con, run_id=DLRM, out_dir=tmp_path))
    finally:
        con.close()
    assert [c.slug for c in charts] == [
        "stragglers-ranking", "stragglers-collective-skew", "stragglers-clock-offsets"]
    skew = charts[1].caption
    head = skew[skew.index("rank 1 waited"):].split(";")[0]
    for rank in (2, 6, 7):
        assert f"rank {rank} (" in head, head
    assert all(chart.png.stat().st_size > 0 and chart.svg.is_file() for chart in charts)


# --------------------------------------------------------------------------- megatron_cpu


def test_every_cpu_collective_is_matched_on_every_member(warehouse: Path) -> None:
    for run in CPU_RUNS:
        [(calls,)] = query_warehouse(
            warehouse, "select count(*) from fct_cpu_collectives where run_id = ? "
            "and event_type = 'call'", [run])
        [(members, instances, incomplete, devices)] = query_warehouse(
            warehouse,
            "select sum(ranks_matched), count(*), count(*) filter (where not is_complete), "
            "list(distinct device) from fct_collectives where run_id = ?", [run])
        assert members == calls > 0, run
        assert incomplete == 0 and devices == ["cpu"], run
        # P2P sends meet their receives: one pair per transfer, peers from c10d's dst/src.
        [(pairs, bad)] = query_warehouse(
            warehouse, "select count(*), count(*) filter (where sender_rank is null or "
            "receiver_rank is null or sender_rank = receiver_rank) from fct_collectives "
            "where run_id = ? and is_p2p", [run])
        assert pairs > 0 and bad == 0, run


def test_cpu_run_offsets_are_zero_on_one_host(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse, "select distinct mode, offset_ns from dim_rank_clock_offsets "
        "where list_contains(?, run_id)", [list(CPU_RUNS)])
    assert rows == [("none", 0)]


# --------------------------------------------------------------------------- portability


@pytest.mark.parametrize("dialect", ["spark", "trino"])
def test_distributed_models_transpile(warehouse: Path, dialect: str) -> None:
    compiled = warehouse / DBT_ARTIFACTS_DIR / "target" / "compiled" / "tracehouse" / "models"
    for name in MODELS:
        [path] = [p for p in compiled.rglob(f"{name}.sql") if p.parent.suffix != ".yml"]
        out = sqlglot.transpile(path.read_text(), read="duckdb", write=dialect,
                                unsupported_level=sqlglot.ErrorLevel.RAISE)
        assert out and out[0].strip(), name


def test_ground_truth_records_skew_per_rank(truth: dict) -> None:
    """The simulator records each rank's clock skew; ranks of one node share it."""
    skews: dict[int, set[float]] = {}
    for row in truth["ranks"]:
        skews.setdefault(row["node"], set()).add(row["clock_skew_us"])
    assert all(len(values) == 1 for values in skews.values())
    assert json.dumps(truth["config"]["clock_skew_us"]) == "200.0"


# --------------------------------------------------------------------------- perfetto export


def test_export_links_collective_members_and_writes_cpu_calls(warehouse: Path,
                                                               tmp_path: Path) -> None:
    """Flow arrows: one chain per matched instance, first arrival to last; CPU calls exported."""
    from tracehouse.reports.perfetto import export_perfetto

    for run in (DLRM, "tp2_pp2_dp2"):
        out = tmp_path / f"{run}.json"
        result = export_perfetto(warehouse, run, out, fmt="json")
        events = json.loads(out.read_bytes())["traceEvents"]
        phases = [event["ph"] for event in events if event.get("cat") == "collective"]
        [(instances, middles)] = query_warehouse(
            warehouse, "select count(*), sum(ranks_matched - 2) from fct_collectives "
            "where run_id = ? and ranks_matched > 1", [run])
        assert phases.count("s") == phases.count("f") == instances == result.flows > 0
        assert phases.count("t") == middles
        [(calls,)] = query_warehouse(
            warehouse, "select count(*) from fct_cpu_collectives where run_id = ?", [run])
        assert result.cpu_collective_slices == calls
        assert result.offsets_applied
