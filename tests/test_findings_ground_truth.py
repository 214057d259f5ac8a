"""Ground truth for fct_findings: each injected cause fires its rule as the top finding.

Simulated runs (``tracehouse simulate``), all from one small pipeline layout
(TP1 x PP2 x DP2, 16 microbatches) whose clean run fires nothing, then the
same layout with one cause injected: a 1.5x straggler rank, a whole stage
1.5x slower, too few microbatches, clock skew between nodes. Each must make
its rule the iteration's top finding (finding_rank 1) with the figure the
injection implies within 10%. The warehouse is built once for the module.
Causes the simulator cannot inject yet (exposed DP reduce, launch-bound
kernels, a slow link: `--no-overlap-grad-reduce`, `--launch-overhead-us`,
`--slow-group`, coming to `tracehouse simulate`) are skipped and say so.
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


@pytest.mark.parametrize("rule_id, option", [
    ("exposed_dp_comm", "--no-overlap-grad-reduce"),
    ("host_bound_launches", "--launch-overhead-us"),
    ("exposed_tp_comm", "--slow-group tp:FACTOR"),
])
def test_causes_the_simulator_cannot_inject_yet(rule_id: str, option: str) -> None:
    from tracehouse.simulate import SimConfig

    fields = set(SimConfig.__dataclass_fields__)
    wanted = {"--no-overlap-grad-reduce": "overlap_grad_reduce",
              "--launch-overhead-us": "launch_overhead_us",
              "--slow-group tp:FACTOR": "slow_groups"}[option]
    if wanted not in fields:
        pytest.skip(f"{rule_id}: tracehouse simulate has no {option} yet (the lead is adding it)")
    pytest.fail(f"tracehouse simulate has {option} now: write {rule_id}'s ground-truth test")
