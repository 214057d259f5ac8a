"""Ground truth for fct_findings: each injected cause fires its rule as the top finding.

Simulated runs (``tracehouse simulate``), all from one small pipeline layout
(TP1 x PP2 x DP2, 16 microbatches) whose clean run fires nothing, then the
same layout with one cause injected: a 1.5x straggler rank, a whole stage
1.5x slower, too few microbatches, clock skew between nodes, 50 us more
host time per kernel launch, a 4x slower data-parallel link. Each must make
its rule the iteration's top finding (finding_rank 1) with the figure the
injection implies within 10% (for the launch overhead and the slow link:
the step time they added over the clean run). Megatron without
--overlap-grad-reduce is checked in two layouts against its overlapped twin
(same seed): in the pipeline layout it costs too little to fire, but its
price still grows by the step's growth (only stage 0 loses its overlap, and
stage 0 sets the step); without a pipeline (DP2 on one node, eight
microbatches) it fires as the top finding while the twin fires nothing. The
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
                            gpus_per_node=4, seed=5)
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


def _fired(simulated: Simulated, run: str) -> list[dict]:
    rows = query_warehouse(simulated.root, """
        select rule_id, finding_rank, figure, subject, evidence_rank, time_at_stake_ns
        from fct_findings where run_id = $run and status = 'fired'
        order by iteration, finding_rank""", {"run": run})
    names = ("rule_id", "finding_rank", "figure", "subject", "evidence_rank", "time_at_stake_ns")
    return [dict(zip(names, row, strict=True)) for row in rows]


def _top(simulated: Simulated, run: str) -> dict:
    fired = _fired(simulated, run)
    assert fired, f"nothing fired on {run}"
    return fired[0]


def test_a_clean_run_fires_nothing(simulated: Simulated) -> None:
    assert _fired(simulated, "clean") == []
    statuses = query_warehouse(simulated.root, """
        select count(*) from fct_findings where run_id = 'clean' and status = 'passed'""")
    assert statuses[0][0] >= 5  # the rules were evaluated, not skipped


def test_straggler(simulated: Simulated) -> None:
    """Rank 1's compute 1.5x: over its stage's median (two ranks: 1 and 1.5) it is 1.2x."""
    top = _top(simulated, "straggler")
    factors = [rank["straggler_factor"] for rank in simulated.truths["straggler"]["ranks"]
               if rank["pp"] == 0]
    assert sorted(factors) == [1.0, 1.5]
    assert top["rule_id"] == "straggler" and top["evidence_rank"] == 1
    assert top["figure"] == pytest.approx(1.5 / statistics.median(factors), rel=0.10)


def test_slow_stage(simulated: Simulated) -> None:
    """Stage 1's compute 1.5x: its busy over the two stages' mean is 1.5 / 1.25."""
    top = _top(simulated, "slow_stage")
    assert top["rule_id"] == "stage_imbalance"
    assert top["figure"] == pytest.approx(1.5 / 1.25, rel=0.10)


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
    return query_warehouse(simulated.root, "select time_at_stake_ns from fct_findings "
                           "where run_id = $run and rule_id = $rule",
                           {"run": run, "rule": rule_id})[0][0]


def test_launch_bound(simulated: Simulated) -> None:
    """50 us more host time per launch: the GPU waits for the CPU, and what the rule puts
    at stake is what the overhead added to the step (the clean run's step as baseline)."""
    top = _top(simulated, "launch_bound")
    injected = _step(simulated, "launch_bound") - _step(simulated, "clean")
    assert simulated.truths["launch_bound"]["launch_overhead_us"] == 50.0
    assert top["rule_id"] == "host_bound_launches"
    assert top["time_at_stake_ns"] == pytest.approx(injected, rel=0.10)


def test_slow_data_parallel_link(simulated: Simulated) -> None:
    """Every DP transfer 4x slower: the exposed DP communication grows by what the slow
    link added to the step."""
    top = _top(simulated, "slow_dp_link")
    injected = _step(simulated, "slow_dp_link") - _step(simulated, "clean")
    grown = top["time_at_stake_ns"] - _at_stake(simulated, "clean", "exposed_dp_comm")
    assert top["rule_id"] == "exposed_dp_comm"
    assert grown == pytest.approx(injected, rel=0.10)


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
    assert grown == pytest.approx(injected, rel=0.10)


def test_no_overlap_in_a_pipeline_is_priced_on_the_stage_that_sets_the_step(
        simulated: Simulated) -> None:
    """With PP2 and 16 microbatches only stage 0 loses its overlap (1F1B hides the last
    stage's reduce in the drain either way): too little to fire (2% of the step, under the
    5% fire share), but the price follows the stage that sets the step, so it grows by the
    step's growth, where the ranks' mean would grow by half of it."""
    grown, injected = _grown_like_the_step(simulated, "no_overlap", "clean")
    assert injected > 0
    assert grown == pytest.approx(injected, rel=0.10)
    assert "exposed_dp_comm" not in [row["rule_id"] for row in _fired(simulated, "no_overlap")]
