"""Megatron structure on real megatron-core traces captured on CPU (no kernels).

The three runs in ../shared/data/kineto/megatron_cpu are read from the
session's reference warehouse (conftest: ingested and built once, beside
other runs, so every query keeps to these three). Every forward and
backward step of every microbatch must be found with its phase and
microbatch index, and the marts give CPU-side timings instead of empty rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ReferenceWarehouse, query_warehouse

pytestmark = pytest.mark.slow

#: run -> (world size, traced iterations, forward/backward steps per rank and iteration).
#: The interleaved run has M x vpp = 4 x 2 steps per rank.
RUNS = {
    "tp2_pp2_dp2": (8, [3, 5], 4),
    "tp1_pp4_dp2": (8, [3], 8),
    "tp2_pp2_dp1_vpp2": (4, [3], 8),
}
#: run -> vpp size (from topology.json beside the traces).
VPP = {"tp2_pp2_dp2": 1, "tp1_pp4_dp2": 1, "tp2_pp2_dp1_vpp2": 2}


#: The bound parameter of every query: these runs only.
OURS = [list(RUNS)]


@pytest.fixture
def warehouse(reference_warehouse: ReferenceWarehouse) -> Path:
    return reference_warehouse.root


def test_every_microbatch_step_is_found(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select run_id, rank, iteration, phase, list(microbatch order by microbatch)
        from fct_microbatch_phases
        where phase in ('forward', 'backward') and microbatch is not null
            and list_contains(?, run_id)
        group by all
        """,
        OURS,
    )
    found: dict[tuple[str, int, int, str], list[int]] = {
        (run, rank, it, phase): mbs for run, rank, it, phase, mbs in rows
    }
    for run, (world, iterations, steps) in RUNS.items():
        for rank in range(world):
            for iteration in iterations:
                for phase in ("forward", "backward"):
                    key = (run, rank, iteration, phase)
                    assert found.get(key) == list(range(steps)), key


def test_cpu_only_traces_give_cpu_timings(warehouse: Path) -> None:
    [(kernels,)] = query_warehouse(
        warehouse, "select count(*) from fct_kernels where list_contains(?, run_id)", OURS)
    assert kernels == 0
    rows = query_warehouse(
        warehouse,
        """
        select timing_source, phase, min(wall_ns), bool_and(busy_ns <= wall_ns)
        from fct_microbatch_phases where list_contains(?, run_id) group by all
        """,
        OURS,
    )
    assert {source for source, *_ in rows} == {"cpu"}
    assert {phase for _, phase, *_ in rows} == {
        "forward", "backward", "pp_p2p", "dp_sync", "optimizer"
    }  # fmt: skip
    assert all(min_wall > 0 and within for _, _, min_wall, within in rows)


def test_optimizer_is_matched_on_the_function_not_the_package(warehouse: Path) -> None:
    """The original's `*optimizer*` matched every function under megatron/core/optimizer/."""
    rows = query_warehouse(
        warehouse,
        "select distinct function_name from intermediate.int_cpu_steps_classified"
        " where phase = 'optimizer' and list_contains(?, run_id)",
        OURS,
    )
    names = {name for (name,) in rows}
    assert names and names <= {"step", "step_with_ready_grads", "_step"}


def test_every_chunk_has_every_microbatch(warehouse: Path) -> None:
    """M microbatches per vpp chunk, stage and iteration; no chunk without VPP."""
    rows = query_warehouse(
        warehouse,
        """
        select run_id, rank, iteration, phase,
               list(distinct [vpp_chunk, chunk_microbatch]), count(*),
               bool_and(vpp_chunk is null and chunk_microbatch = microbatch)
        from fct_microbatch_phases
        where phase in ('forward', 'backward') and microbatch is not null
            and list_contains(?, run_id)
        group by all
        """,
        OURS,
    )
    assert len(rows) == sum(world * len(its) * 2 for world, its, _ in RUNS.values())
    for run, rank, iteration, phase, pairs, count, no_chunk in rows:
        world, iterations, steps = RUNS[run]
        vpp = VPP[run]
        if vpp == 1:
            assert no_chunk, (run, rank, iteration, phase)
            continue
        per_chunk = steps // vpp
        expected = sorted([chunk, mb] for chunk in range(vpp) for mb in range(per_chunk))
        assert count == steps and sorted(pairs) == expected, (run, rank, iteration, phase)


def test_interleaved_order_matches_megatron(warehouse: Path) -> None:
    """The GPTModel_<chunk> frame of each forward step agrees with megatron-core's
    schedule table (groups of pp size through chunk 0..v-1), and backward steps
    run the chunks in reverse."""
    rows = query_warehouse(
        warehouse,
        """
        select phase, chunk_source, microbatch, vpp_chunk, schedule_chunk, chunk_microbatch
        from intermediate.int_microbatch_steps_chunked
        where run_id = 'tp2_pp2_dp1_vpp2'
        """,
    )
    assert rows
    pp, vpp = 2, 2
    for phase, source, k, chunk, schedule_chunk, chunk_mb in rows:
        table_chunk = (k // pp) % vpp
        assert chunk_mb == (k // (pp * vpp)) * pp + k % pp
        if phase == "forward":
            assert source == "module_frame" and chunk == schedule_chunk == table_chunk
        else:
            assert source == "schedule" and chunk == vpp - 1 - table_chunk


def test_cpu_collectives_land_on_their_group(warehouse: Path) -> None:
    """From the call stack: every PP send/recv (call and its gloo wait) on the rank's
    pp group, DDP grad reduce-scatter and param all-gather on its data-parallel
    group, the batch broadcast and TP mappings on its tp group."""
    rows = query_warehouse(
        warehouse,
        """
        select collectives.run_id, collectives.collective, collectives.event_type,
               collectives.comm_group_kind, collectives.comm_process_group_kind,
               bool_and(
                   case collectives.comm_process_group_kind
                       when 'pp' then collectives.comm_group_index = ranks.pp_group_index
                       when 'tp' then collectives.comm_group_index = ranks.tp_group_index
                       else collectives.comm_group_index is not null
                   end
               ),
               bool_and(collectives.is_outliving_call_site),
               count(*)
        from fct_cpu_collectives as collectives
        inner join dim_ranks as ranks
            on collectives.run_id = ranks.run_id and collectives.rank = ranks.rank
        group by all
        """,
    )
    by_key = {tuple(row[:3]): row[3:] for row in rows}
    for run in ("tp1_pp4_dp2", "tp2_pp2_dp2"):
        for collective in ("send", "recv"):
            for event_type in ("call", "wait"):
                kind, group_kind, exact, outlives, n = by_key[(run, collective, event_type)]
                assert (kind, group_kind, exact) == ("pp", "pp", True), (run, collective)
                assert outlives == (event_type == "wait") and n > 0
        for collective in ("reduce_scatter_tensor_coalesced", "allgather_into_tensor_coalesced"):
            kind, group_kind, exact, _, n = by_key[(run, collective, "call")]
            assert (kind, group_kind, exact) == ("dp", "dp_cp", True), (run, collective)
        kind, group_kind, exact, _, _ = by_key[(run, "broadcast", "call")]
        assert (kind, group_kind, exact) == ("tp", "tp", True), run
    # Only the harness's own train_step all-reduce (one per rank and iteration)
    # has no Megatron call site.
    unclassified = query_warehouse(
        warehouse,
        """
        select run_id, rank, iteration, count(*), list(distinct call_site_function)
        from fct_cpu_collectives
        where comm_group_kind is null and list_contains(?, run_id)
        group by all
        """,
        OURS,
    )
    assert all(n == 1 for *_, n, _ in unclassified), unclassified


def test_cpu_pipeline_bubbles(warehouse: Path) -> None:
    """One row per pp group, iteration and stage, from the CPU step frames."""
    rows = query_warehouse(
        warehouse,
        """
        select run_id, count(*), count(distinct (pp_group_index, iteration, pp_stage)),
               bool_and(timing_source = 'cpu'), bool_and(bubble_ratio between 0 and 1),
               min(theoretical_bubble_ratio), max(theoretical_bubble_ratio)
        from fct_pipeline_bubbles where list_contains(?, run_id) group by run_id
        """,
        OURS,
    )
    #: run -> (pp, vpp, microbatches per chunk)
    layouts = {"tp2_pp2_dp2": (2, 1, 4), "tp1_pp4_dp2": (4, 1, 8), "tp2_pp2_dp1_vpp2": (2, 2, 4)}
    assert {run for run, *_ in rows} == set(RUNS)
    for run, n, distinct, cpu, in_range, low, high in rows:
        world, iterations, _ = RUNS[run]
        p, v, m = layouts[run]
        assert n == distinct == world * len(iterations) and cpu and in_range, run
        assert low == high == pytest.approx((p - 1) / (v * m + p - 1)), run
