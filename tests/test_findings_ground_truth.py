"""Ground truth for fct_findings: each injected cause fires its rule as the top finding.

Simulated runs (``tracehouse simulate``), all from one small pipeline layout
(TP1 x PP2 x DP2, 16 microbatches, op shapes recorded) whose clean run fires
nothing, then the same layout with one cause injected: a 1.5x straggler
rank, a whole stage 1.5x slower, too few microbatches, clock skew between
nodes, 50 us more host time per kernel launch, a 4x slower data-parallel
link, Megatron's full activation recomputation, GEMMs 2x slower, an 8x
slower pipeline link. Each must make its rule the iteration's top finding
(finding_rank 1) with the figure the injection implies within 10%. The
what-if models are built by default, so four rules (straggler,
stage_imbalance, host_bound_launches, exposed_dp_comm) are priced by the
replay's saving (fct_what_if.saved_ns of their scenario); where a test
checks a price against the injected cause (the launch overhead, the slow
DP link, the lost gradient-reduce overlap: the step time each added over
its clean twin) it is that replay price, within 3% (the replay's error
bound, issue 33; it is 0.0% on these runs). Selective recomputation (the
core attention only) is checked to cost what the simulator timed and too
little to fire. Megatron without --overlap-grad-reduce is checked in two
layouts against its overlapped twin
(same seed): in the pipeline layout it costs too little to fire, but its
price still grows by the step's growth (only stage 0 loses its overlap, and
stage 0 sets the step); without a pipeline (DP2 on one node, eight
microbatches) it fires as the top finding while the twin fires nothing.
Exposed tensor-parallel communication is checked on TP2 (Megatron without
--tp-comm-overlap runs the forward's TP all-reduces on the compute stream:
exposed in a clean run too, so the rule fires there) and on its twin with a
4x slower TP link: each time the top finding, its figure the exposed TP
time the simulator states (ground_truth exposed_comm_us) over the step. The
warehouse is built once for the module.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import query_warehouse

pytestmark = pytest.mark.slow  # simulates, ingests and builds

#: The clean layout: the pipeline dominates, DP reduces are small beside 16
#: microbatches, every rank of a stage on one node's links.
BASE: dict[str, Any] = dict(tp=1, pp=2, dp=2, microbatches=16, iterations=1, layers=8,
                            hidden=2048, heads=16, seq_length=2048, vocab=1024,
                            gpus_per_node=4, seed=5, record_shapes=True)
#: Run -> its SimConfig arguments on top of BASE.
RUNS: dict[str, dict[str, Any]] = {
    "clean": {},
    "straggler": {"stragglers": ((1, 1.5),)},
    # Ranks 2 and 3 are pipeline stage 1 (order tp-cp-ep-dp-pp).
    "slow_stage": {"stragglers": ((2, 1.5), (3, 1.5))},
    "few_microbatches": {"microbatches": 2},
    "clock_skew": {"gpus_per_node": 2, "clock_skew_us": 2000.0},
    "launch_bound": {"launch_overhead_us": 50.0},
    "slow_dp_link": {"slow_groups": (("dp", 4.0),)},
    "no_overlap": {"overlap_grad_reduce": False},
    # No pipeline, DP2 on one node: the overlapped twin exposes only its last bucket's
    # reduce (3% of the step), Megatron without overlap every bucket's (8%).
    "dp_overlapped": {"pp": 1, "microbatches": 8},
    "dp_no_overlap": {"pp": 1, "microbatches": 8, "overlap_grad_reduce": False},
    "full_recompute": {"recompute_granularity": "full"},
    "selective_recompute": {"recompute_granularity": "selective"},
    "slow_gemm": {"slow_gemm": 2.0},
    # TP2 inside a node, no DP: Megatron's TP all-reduces without --tp-comm-overlap.
    "tp2": {"tp": 2, "dp": 1},
    "tp2_slow_link": {"tp": 2, "dp": 1, "slow_groups": (("tp", 4.0),)},
    # Every pipeline send/recv 8x slower: each sits between one stage's forward (backward)
    # and the next stage's, so the bubble grows; busy time, balance and the other groups'
    # communication stay as they were.
    "slow_pp_link": {"slow_groups": (("pp", 8.0),)},
}


@dataclass(frozen=True)
class Simulated:
    root: Path
    truths: dict[str, dict]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import SimConfig, simulate_run

    base = tmp_path_factory.mktemp("findings_truth")
    root = base / "warehouse"
    truths = {}
    for run, extra in RUNS.items():
        result = simulate_run(SimConfig(**{**BASE, **extra}), base / run, jobs=1)
        truths[run] = result.ground_truth
        loaded = ingest_paths([result.out_dir], warehouse=root, run=run, jobs=1, progress=False)
        assert not loaded.failed, loaded.failed
    build_warehouse(root, ["--quiet", "--exclude-resource-type", "unit_test"])
    yield Simulated(root=root, truths=truths)


_FINDING_COLUMNS = ("rule_id", "finding_rank", "figure", "subject", "evidence_rank",
                    "evidence_pp_group_index", "time_at_stake_ns", "baseline", "status",
                    "priced_by")
#: How close a replay price must come to the step time its cause added: the replay's
#: error bound (issue 33: at most 3% per iteration; 0.0% on these simulated runs).
REPLAY_TOLERANCE = 0.03


def _fired(simulated: Simulated, run: str) -> list[dict]:
    rows = query_warehouse(simulated.root, f"""
        select {", ".join(_FINDING_COLUMNS)}
        from fct_findings where run_id = $run and status = 'fired'
        order by iteration, finding_rank""", {"run": run})
    return [dict(zip(_FINDING_COLUMNS, row, strict=True)) for row in rows]


def _finding(simulated: Simulated, run: str, rule_id: str) -> dict:
    rows = query_warehouse(simulated.root, f"""
        select {", ".join(_FINDING_COLUMNS)}
        from fct_findings where run_id = $run and rule_id = $rule""",
                           {"run": run, "rule": rule_id})
    assert len(rows) == 1, (run, rule_id, rows)
    return dict(zip(_FINDING_COLUMNS, rows[0], strict=True))


def _top(simulated: Simulated, run: str) -> dict:
    fired = _fired(simulated, run)
    assert fired, f"nothing fired on {run}"
    return fired[0]


def test_a_clean_run_fires_nothing(simulated: Simulated) -> None:
    assert _fired(simulated, "clean") == []
    statuses = query_warehouse(simulated.root, """
        select rule_id from fct_findings where run_id = 'clean' and status = 'passed'""")
    # Every rule was evaluated, not skipped: TP1 still gives exposed_tp_comm a rank to read.
    assert len(statuses) == 10, statuses


def test_straggler(simulated: Simulated) -> None:
    """Rank 1's compute 1.5x: over its stage's median (two ranks: 1 and 1.5) it is 1.2x."""
    top = _top(simulated, "straggler")
    factors = [rank["straggler_factor"] for rank in simulated.truths["straggler"]["ranks"]
               if rank["pp"] == 0]
    assert sorted(factors) == [1.0, 1.5]
    assert top["rule_id"] == "straggler" and top["evidence_rank"] == 1
    assert top["figure"] == pytest.approx(1.5 / statistics.median(factors), rel=0.10)
    assert top["priced_by"] == "what_if"  # fct_what_if's no_straggler


def test_slow_stage(simulated: Simulated) -> None:
    """Stage 1's compute 1.5x: its busy over the two stages' mean is 1.5 / 1.25."""
    top = _top(simulated, "slow_stage")
    assert top["rule_id"] == "stage_imbalance"
    assert top["figure"] == pytest.approx(1.5 / 1.25, rel=0.10)
    assert top["priced_by"] == "what_if"  # fct_what_if's balanced_stages


def test_few_microbatches(simulated: Simulated) -> None:
    top = _top(simulated, "few_microbatches")
    truth = simulated.truths["few_microbatches"]["analytical_bubble_ratio"]
    assert truth == pytest.approx(1 / 3)
    assert top["rule_id"] == "few_microbatches"
    assert top["figure"] == pytest.approx(truth, rel=0.10)


def test_clock_skew(simulated: Simulated) -> None:
    top = _top(simulated, "clock_skew")
    skews = [rank["clock_skew_us"] * 1000 for rank in simulated.truths["clock_skew"]["ranks"]]
    injected = max(skews) - min(skews)
    assert top["rule_id"] == "clock_skew"
    assert top["figure"] == pytest.approx(injected, rel=0.10)


def _step(simulated: Simulated, run: str) -> int:
    return query_warehouse(simulated.root, "select step_ns from fct_iteration_summary "
                           "where run_id = $run", {"run": run})[0][0]


def _at_stake(simulated: Simulated, run: str, rule_id: str) -> int:
    """The rule's time at stake on the run, priced by the replay (asserted)."""
    [(at_stake, priced_by)] = query_warehouse(
        simulated.root, "select time_at_stake_ns, priced_by from fct_findings "
        "where run_id = $run and rule_id = $rule", {"run": run, "rule": rule_id})
    assert priced_by == "what_if", (run, rule_id, priced_by)
    return at_stake


def test_launch_bound(simulated: Simulated) -> None:
    """50 us more host time per launch: the GPU waits for the CPU. The rule is priced by
    the replay without host time (no_host_gaps), which also takes out the clean run's own
    host gaps (0.9% of its step); over the clean run's price it grows by what the
    overhead added to the step."""
    top = _top(simulated, "launch_bound")
    injected = _step(simulated, "launch_bound") - _step(simulated, "clean")
    assert simulated.truths["launch_bound"]["launch_overhead_us"] == 50.0
    assert top["rule_id"] == "host_bound_launches"
    grown = _at_stake(simulated, "launch_bound", "host_bound_launches") - _at_stake(
        simulated, "clean", "host_bound_launches")
    assert grown == pytest.approx(injected, rel=REPLAY_TOLERANCE)


def test_slow_data_parallel_link(simulated: Simulated) -> None:
    """Every DP transfer 4x slower: priced by the replay with the DP transfers hidden
    (perfect_dp_overlap), the exposed DP communication grows by what the slow link
    added to the step."""
    top = _top(simulated, "slow_dp_link")
    injected = _step(simulated, "slow_dp_link") - _step(simulated, "clean")
    grown = _at_stake(simulated, "slow_dp_link", "exposed_dp_comm") - _at_stake(
        simulated, "clean", "exposed_dp_comm")
    assert top["rule_id"] == "exposed_dp_comm"
    assert grown == pytest.approx(injected, rel=REPLAY_TOLERANCE)


def _grown_like_the_step(simulated: Simulated, run: str, twin: str) -> tuple[int, int]:
    """(the growth of exposed_dp_comm's time at stake, the step's growth) from twin to run."""
    grown = _at_stake(simulated, run, "exposed_dp_comm") - _at_stake(simulated, twin,
                                                                     "exposed_dp_comm")
    return grown, _step(simulated, run) - _step(simulated, twin)


def test_no_overlap_grad_reduce(simulated: Simulated) -> None:
    """Megatron without --overlap-grad-reduce, no pipeline: every gradient bucket's
    reduce-scatter waits for the end of the backward. The rule fires as the top finding
    and what it puts at stake grows by what the lost overlap added to the step; the
    overlapped twin fires nothing."""
    assert simulated.truths["dp_no_overlap"]["overlap_grad_reduce"] is False
    assert simulated.truths["dp_overlapped"]["overlap_grad_reduce"] is True
    assert _fired(simulated, "dp_overlapped") == []
    top = _top(simulated, "dp_no_overlap")
    grown, injected = _grown_like_the_step(simulated, "dp_no_overlap", "dp_overlapped")
    assert top["rule_id"] == "exposed_dp_comm"
    assert injected > 0.03 * _step(simulated, "dp_overlapped")  # the cause costs something
    assert grown == pytest.approx(injected, rel=REPLAY_TOLERANCE)


def test_no_overlap_in_a_pipeline_is_priced_on_the_stage_that_sets_the_step(
        simulated: Simulated) -> None:
    """With PP2 and 16 microbatches only stage 0 loses its overlap (1F1B hides the last
    stage's reduce in the drain either way): too little to fire (2% of the step, under the
    5% fire share), but the price follows the stage that sets the step, so it grows by the
    step's growth, where the ranks' mean would grow by half of it."""
    grown, injected = _grown_like_the_step(simulated, "no_overlap", "clean")
    assert injected > 0
    assert grown == pytest.approx(injected, rel=REPLAY_TOLERANCE)
    assert "exposed_dp_comm" not in [row["rule_id"] for row in _fired(simulated, "no_overlap")]


def _rank_steps_ns(simulated: Simulated, run: str) -> dict[int, int]:
    return dict(query_warehouse(simulated.root, "select rank, step_ns from fct_rank_iterations "
                                "where run_id = $run and step_ns > 0", {"run": run}))


def _truth_ranks(simulated: Simulated, run: str) -> dict[int, dict]:
    return {int(rank): facts
            for rank, facts in simulated.truths[run]["timing"]["1"]["ranks"].items()}


def test_full_recompute(simulated: Simulated) -> None:
    """Megatron's full recompute re-runs every layer's forward before its backward: the
    recompute rule fires first, its figure the recomputation the simulator timed over
    the ranks' steps."""
    truth = simulated.truths["full_recompute"]["recompute"]
    assert truth["granularity"] == "full"
    recompute_ns = 1000 * sum(facts["recompute_us"]
                              for facts in _truth_ranks(simulated, "full_recompute").values())
    top = _top(simulated, "full_recompute")
    assert top["rule_id"] == "recompute"
    assert top["baseline"] == pytest.approx(recompute_ns, rel=0.10)
    steps = sum(_rank_steps_ns(simulated, "full_recompute").values())
    assert top["figure"] == pytest.approx(recompute_ns / steps, rel=0.10)


def test_selective_recompute_costs_too_little_to_fire(simulated: Simulated) -> None:
    """Selective recompute re-runs the core attention only: the rule reads what the
    simulator timed, under its 10% threshold, which is why it recommends selective."""
    recompute_ns = 1000 * sum(facts["recompute_us"] for facts
                              in _truth_ranks(simulated, "selective_recompute").values())
    finding = _finding(simulated, "selective_recompute", "recompute")
    assert recompute_ns > 0 and finding["status"] == "passed"
    steps = sum(_rank_steps_ns(simulated, "selective_recompute").values())
    assert finding["figure"] == pytest.approx(recompute_ns / steps, rel=0.10)
    assert _fired(simulated, "selective_recompute") == []


def test_slow_gemms(simulated: Simulated) -> None:
    """GEMMs 2x slower (a card at a lower clock, fp32 GEMMs): the GEMMs' share of the roof
    halves, and low_gemm_mfu fires first; the clean run's GEMMs pass."""
    assert simulated.truths["slow_gemm"]["slow_gemm"] == 2.0
    clean = _finding(simulated, "clean", "low_gemm_mfu")
    assert clean["status"] == "passed"
    top = _top(simulated, "slow_gemm")
    assert top["rule_id"] == "low_gemm_mfu"
    assert top["figure"] == pytest.approx(clean["figure"] / 2.0, rel=0.10)


@pytest.mark.parametrize("run", ["tp2", "tp2_slow_link"])
def test_exposed_tensor_parallel_communication(simulated: Simulated, run: str) -> None:
    """Megatron without --tp-comm-overlap: the forward's TP all-reduces hold the compute
    stream, exposed (so a clean TP2 run fires the rule too); a 4x slower TP link exposes
    more. exposed_tp_comm is the top finding and its figure is the exposed TP transfer
    time the simulator states for the rank that sets the step, over that rank's step."""
    top = _top(simulated, run)
    assert top["rule_id"] == "exposed_tp_comm"
    rank = top["evidence_rank"]
    exposed_ns = 1000 * _truth_ranks(simulated, run)[rank]["exposed_comm_us"]["tp"]
    assert top["baseline"] == pytest.approx(exposed_ns, rel=0.10)
    assert top["figure"] == pytest.approx(exposed_ns / _rank_steps_ns(simulated, run)[rank],
                                          rel=0.10)


def test_slow_pipeline_link_raises_the_bubble_above_theory(simulated: Simulated) -> None:
    """Every P2P transfer 8x slower: the pipeline waits on its links, so the bubble grows
    over the schedule's theory and bubble_above_theory fires first (busy time and balance
    are the clean run's). What it puts at stake grows by the exposed P2P time the simulator
    states for the stage (ground_truth exposed_comm_us), less the theory's share of the
    longer span."""
    top = _top(simulated, "slow_pp_link")
    assert top["rule_id"] == "bubble_above_theory"
    clean = _finding(simulated, "clean", "bubble_above_theory")
    theory = simulated.truths["clean"]["analytical_bubble_ratio"]

    def exposed_p2p_and_span(run: str) -> tuple[float, float]:
        timing = simulated.truths[run]["timing"]["1"]
        ranks = _truth_ranks(simulated, run)
        exposed = max(ranks[rank]["exposed_comm_us"]["pp"] for rank in ranks)
        span = max(group["schedule_span_us"] for group in timing["pipeline_groups"])
        return 1000 * exposed, 1000 * span

    slow_p2p, slow_span = exposed_p2p_and_span("slow_pp_link")
    clean_p2p, clean_span = exposed_p2p_and_span("clean")
    injected = (slow_p2p - clean_p2p) - theory * (slow_span - clean_span)
    grown = top["time_at_stake_ns"] - clean["time_at_stake_ns"]
    assert grown == pytest.approx(injected, rel=0.10)
    assert [row["rule_id"] for row in _fired(simulated, "slow_pp_link")] == [
        "bubble_above_theory"]
