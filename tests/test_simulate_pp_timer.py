"""Simulated runs write PP-timer logs, and they land in ``fct_pp_timer_events``.

The logs must agree with the pipeline's dependencies (a microbatch's forward
on the next stage starts after it ends on this one; backward runs the other
way), cover M x V forward and backward passes per rank, and go through the
real ingest and dbt build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, SimulatedRun, simulate_run

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

SMALL = dict(layers=8, hidden=256, heads=8, seq_length=256, vocab=1024)
LAYOUTS = {
    "pp4_dp2": dict(pp=4, dp=2, microbatches=8),
    "tp2_pp2_vpp2": dict(tp=2, pp=2, vpp=2, microbatches=4, schedule="interleaved"),
}
_KEY = re.compile(r"^(forward|backward)-(?:(\d+)-)?(\d+)-(start|end)$")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SimulatedRun]:
    root = tmp_path_factory.mktemp("sim_pp_timer")
    return {name: simulate_run(SimConfig(**SMALL, **layout, iterations=2, first_iteration=5),
                               root / name)
            for name, layout in LAYOUTS.items()}


def passes(path: Path) -> dict[tuple[str, int, int], tuple[float, float]]:
    """(phase, chunk, microbatch) -> (start ms, end ms) of one log."""
    doc = json.loads(path.read_text())
    edges: dict[tuple[str, int, int], dict[str, float]] = {}
    for key, value in doc.items():
        match = _KEY.match(key)
        if match:
            phase, chunk, mb, edge = match.groups()
            edges.setdefault((phase, int(chunk or 0), int(mb)), {})[edge] = value
    return {k: (v["start"], v["end"]) for k, v in edges.items()}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_logs_follow_the_pipeline(runs: dict[str, SimulatedRun], name: str) -> None:
    run = runs[name]
    cfg = run.config
    assert run.pp_timer_iteration == 5 and len(run.pp_timer_paths) == cfg.world
    assert {p.parent.name for p in run.pp_timer_paths} == {"pp_timer_logs"}
    by_rank = {}
    for path in run.pp_timer_paths:
        meta = json.loads(path.read_text())["tracehouse"]
        assert (meta["iteration"], meta["clock"], meta["vpp_size"]) == (5, "simulated", cfg.vpp)
        assert path.name.startswith(f"event_times_PP{cfg.pp}_VPP{cfg.vpp}_TPxCPxDP_rank_")
        by_rank[meta["rank"]] = (meta["pp_rank"], passes(path))
    expected = {(phase, chunk, mb) for phase in ("forward", "backward")
                for chunk in range(cfg.vpp) for mb in range(cfg.microbatches)}
    truth = run.ground_truth
    assert truth["pp_timer"]["iteration"] == 5
    for group in truth["timing"]["5"]["pipeline_groups"]:
        stages = [by_rank[r] for r in group["ranks"]]
        assert [s[0] for s in stages] == list(range(cfg.pp))
        for stage in stages:
            assert set(stage[1]) == expected
            assert all(0 <= start < end for start, end in stage[1].values())
        # Virtual stages in forward order: chunk-major, pipeline rank within.
        order = [(chunk, p) for chunk in range(cfg.vpp) for p in range(cfg.pp)]
        for mb in range(cfg.microbatches):
            for (c0, p0), (c1, p1) in zip(order, order[1:]):
                assert stages[p0][1][("forward", c0, mb)][1] <= \
                    stages[p1][1][("forward", c1, mb)][0]
                assert stages[p1][1][("backward", c1, mb)][1] <= \
                    stages[p0][1][("backward", c0, mb)][0]
            last_c, last_p = order[-1]
            assert stages[last_p][1][("forward", last_c, mb)][1] <= \
                stages[last_p][1][("backward", last_c, mb)][0]
        # The timer brackets whole passes: at least the compute the ground truth counts.
        for p, stage in enumerate(stages):
            timed_us = sum(end - start for start, end in stage[1].values()) * 1000.0
            assert timed_us >= group["stage_busy_us"][p] * (1 - 1e-6)


def test_fct_pp_timer_events_from_simulated_runs(runs: dict[str, SimulatedRun],
                                                 tmp_path: Path) -> None:
    root = tmp_path / "wh"
    for name, run in runs.items():
        result = ingest_paths([run.out_dir], root, run=name, progress=False)
        assert not result.failed and len(result.pp_timers) == run.config.world
    assert run_dbt(["build", "-s", "+fct_pp_timer_events"], root) == EXIT_OK
    with duckdb.connect(str(Warehouse(root).database), read_only=True) as con:
        counts = con.execute(
            "select run_id, pp_rank, rank, phase, count(*), count(distinct vpp_chunk), "
            "min(iteration), max(iteration) from fct_pp_timer_events group by all").fetchall()
    for name, run in runs.items():
        cfg = run.config
        rows = [row for row in counts if row[0] == name]
        assert len(rows) == cfg.world * 2  # every rank, both phases
        for _run, _pp_rank, _rank, _phase, count, chunks, low, high in rows:
            assert (count, chunks, low, high) == (cfg.microbatches * cfg.vpp, cfg.vpp, 5, 5)
        stages = {row[1] for row in rows}
        assert stages == set(range(cfg.pp))


def test_empty_lake_table_still_builds(tmp_path: Path) -> None:
    root = tmp_path / "wh"
    run = simulate_run(SimConfig(**SMALL, pp=2, microbatches=2), tmp_path / "sim")
    for path in run.pp_timer_paths:
        path.unlink()
    result = ingest_paths([run.out_dir], root, progress=False)
    assert result.pp_timers == [] and not result.failed
    assert run_dbt(["build", "-s", "+fct_pp_timer_events"], root) == EXIT_OK
    with duckdb.connect(str(Warehouse(root).database), read_only=True) as con:
        assert con.execute("select count(*) from fct_pp_timer_events").fetchone() == (0,)
