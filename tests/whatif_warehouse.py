"""One warehouse of simulated runs with a known injected cause, for the what-if scenarios.

The scenario tests (test_whatif_scenarios.py), ``tracehouse whatif``'s
(test_cli_whatif.py) and the report section's (test_report_whatif.py) read
the same runs, and one ``dbt build`` with the var ``whatif`` on over all of
them is most of their cost. :func:`build_whatif_warehouse` builds it;
conftest's session fixture ``whatif_wh`` calls it on first use and holds it
read-only.

Runs, one small Megatron configuration (COMMON: TP2 x PP2 x DP2, 1F1B,
four microbatches, one iteration, two GPUs per node so DP and PP cross
nodes) with the same seed, so each differs from ``clean`` only by its
cause (the last pair has a layout of its own):

* ``clean`` -- nothing injected;
* ``slow_stage`` -- every rank of pipeline stage 1 (ranks 4-7) slowed 1.5x
  (``--straggler`` on each): the stages' compute out of balance;
* ``slow_dp`` -- every transfer in the data-parallel groups 3x slower
  (``--slow-group dp:3``): a slow link;
* ``launch_bound`` -- 40 us more host time on every kernel launch
  (``--launch-overhead-us 40``): the GPU waits for the host;
* ``no_overlap`` against ``overlap_clean`` -- Megatron without and with
  --overlap-grad-reduce (``--no-overlap-grad-reduce``: the DP
  reduce-scatters after the whole backward, exposed) in a layout of their
  own, OVERLAP (no pipeline, DP across nodes, eight layers): in COMMON's
  the gradients fill one bucket per stage, which is ready only at the end
  of the backward either way, and Megatron's 1F1B overlaps only the first
  stage's reduction, so the cause costs nothing there to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: dbt arguments that ask for the what-if models (on by default: dbt_project.yml).
WHATIF_VARS = ["--vars", "{whatif: true}"]

#: The configuration every run shares (tracehouse.simulate.SimConfig fields).
COMMON = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=1, layers=4, hidden=2048,
              heads=16, seq_length=2048, vocab=32000, gpus_per_node=2, seed=3)

#: The overlap pair's layout: DP 2 across nodes, no pipeline, eight layers (several
#: gradient buckets, each reduced during the backward when overlap is on).
OVERLAP = dict(tp=1, pp=1, dp=2, microbatches=4, iterations=1, layers=8, hidden=2048,
               heads=16, seq_length=2048, vocab=32000, gpus_per_node=1, seed=3)

#: Ranks of pipeline stage 1 in COMMON's layout (Megatron's order: tp, dp, pp).
STAGE_1_RANKS = (4, 5, 6, 7)
#: How much slower slow_dp's data-parallel transfers are.
SLOW_DP_FACTOR = 3.0
#: Host time launch_bound adds to every kernel launch, us.
LAUNCH_OVERHEAD_US = 40.0


def run_configs() -> dict:
    """Run name -> SimConfig of the warehouse's runs."""
    from tracehouse.simulate import SimConfig

    return {
        "clean": SimConfig(**COMMON),
        "slow_stage": SimConfig(**COMMON, stragglers=tuple((r, 1.5) for r in STAGE_1_RANKS)),
        "slow_dp": SimConfig(**COMMON, slow_groups=(("dp", SLOW_DP_FACTOR),)),
        "launch_bound": SimConfig(**COMMON, launch_overhead_us=LAUNCH_OVERHEAD_US),
        "overlap_clean": SimConfig(**OVERLAP),
        "no_overlap": SimConfig(**OVERLAP, overlap_grad_reduce=False),
    }


@dataclass(frozen=True)
class WhatifWarehouse:
    """A built warehouse (``root``) and the folders its runs were simulated into."""

    root: Path
    sources: dict[str, Path]


def ingest_simulated(base: Path, warehouse: Path, configs: dict) -> dict[str, Path]:
    """Simulate each run under ``base`` and ingest it into ``warehouse`` under its name."""
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.simulate import simulate_run

    sources = {}
    for run, config in configs.items():
        simulate_run(config, base / run, jobs=1)
        result = ingest_paths([base / run], warehouse=warehouse, run=run, progress=False)
        assert not result.failed, result.failed
        sources[run] = base / run
    return sources


def build_whatif_warehouse(base: Path) -> WhatifWarehouse:
    """Simulate, ingest and build (what-if on) every run of :func:`run_configs`."""
    from tracehouse.build.dbt import build_warehouse

    root = base / "warehouse"
    sources = ingest_simulated(base, root, run_configs())
    build_warehouse(root, WHATIF_VARS)
    return WhatifWarehouse(root=root, sources=sources)
