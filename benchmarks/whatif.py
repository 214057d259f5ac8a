#!/usr/bin/env python3
"""What-if benchmark (issue 33): replay fidelity, the no-straggler check, and scale.

One command, prints figures (benchmarks/README.md, "whatif.py"):

1. ``--check``: simulate one run with a 1.5x straggler (rank 5) and clock
   skew and the same run without either (same seed), ingest both into one
   warehouse, build with the var ``whatif`` on; print fct_step_replay's
   error per run, and compare the straggler run's no-straggler prediction
   (fct_what_if: every compute kernel at its stage's median,
   int_whatif_work_scaled's rule) with the clean run's measured step
   (slowest rank).
2. ``--scale``: simulate a ``--tp x --pp x --dp`` run (default 256 ranks), ingest,
   build, then time the what-if models alone (``dbt run -s
   int_replay_nodes_listed+``) and the replay routine alone on its graph.

    python benchmarks/whatif.py --check [--schedule 1f1b|interleaved]
    python benchmarks/whatif.py --scale [--tp 4 --pp 8 --dp 8] [--microbatches 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

from tracehouse.build.dbt import build_warehouse, run_dbt
from tracehouse.core.replay import replay
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.runner import ingest_paths
from tracehouse.query.whatif import load_run_graph
from tracehouse.simulate import SimConfig, simulate_run

#: The what-if models build only with this var on (dbt_project.yml, `whatif`).
WHATIF_VARS = ["--vars", "{whatif: true}"]


def _run_graph(con: duckdb.DuckDBPyConnection, run: str):
    """(node ids, graph) of one run, its nodes renumbered 1..n (as the loader wants):
    the loader ``tracehouse whatif`` uses."""
    loaded = load_run_graph(con, run)
    return loaded.node_id, loaded.graph


def check(schedule: str, tmp: Path) -> None:
    common = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=2, layers=8, hidden=2048,
                  heads=16, seq_length=2048, vocab=32000, gpus_per_node=2, seed=3)
    if schedule == "interleaved":
        common.update(vpp=2, schedule="interleaved")
    runs = {"straggler": SimConfig(**common, stragglers=((5, 1.5),), clock_skew_us=200.0),
            "clean": SimConfig(**common)}
    warehouse = tmp / "warehouse"
    for name, cfg in runs.items():
        simulate_run(cfg, tmp / name, jobs=1)
        result = ingest_paths([tmp / name], warehouse=warehouse, run=name, progress=False)
        assert not result.failed, result.failed
    build_warehouse(warehouse, WHATIF_VARS)
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    print(con.sql("select run_id, count(*) as rank_iterations, "
                  "round(100 * avg(error_ratio), 3) as mean_error_pct, "
                  "round(100 * max(error_ratio), 3) as max_error_pct, "
                  "sum(inconsistent_node_count) as inconsistent "
                  "from main.fct_step_replay group by 1 order by 1"))
    clean = dict(con.sql("select iteration, max(step_ns) from main.fct_rank_iterations "
                         "where run_id = 'clean' group by 1").fetchall())
    rows = con.sql("select iteration, step_ns, predicted_step_ns from main.fct_what_if "
                   "where run_id = 'straggler' and scenario = 'no_straggler' "
                   "order by 1").fetchall()
    for iteration, measured, predicted in rows:
        error = abs(predicted - clean[iteration]) / clean[iteration]
        print(f"{schedule} iteration {iteration}: straggler run step {measured} ns, "
              f"no_straggler predicted {predicted} ns, clean run measured {clean[iteration]} ns, "
              f"error {100 * error:.2f}%")


def scale(args: argparse.Namespace, tmp: Path) -> None:
    cfg = SimConfig(tp=args.tp, pp=args.pp, dp=args.dp, microbatches=args.microbatches,
                    iterations=1, layers=args.pp * 2, hidden=1024, heads=16, seq_length=1024,
                    vocab=8000)
    began = time.perf_counter()
    simulate_run(cfg, tmp / "run", jobs=2)
    print(f"simulate {cfg.world} ranks: {time.perf_counter() - began:.1f} s")
    warehouse = tmp / "warehouse"
    began = time.perf_counter()
    result = ingest_paths([tmp / "run"], warehouse=warehouse, run="run", jobs=2, progress=False)
    assert not result.failed, result.failed
    print(f"ingest: {time.perf_counter() - began:.1f} s")
    began = time.perf_counter()
    build_warehouse(warehouse, WHATIF_VARS)
    print(f"full build: {time.perf_counter() - began:.1f} s")
    began = time.perf_counter()
    code = run_dbt(["run", "-s", "int_replay_nodes_listed+", *WHATIF_VARS], warehouse)
    print(f"what-if models alone (dbt run -s int_replay_nodes_listed+): "
          f"{time.perf_counter() - began:.1f} s, exit {code}")
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    _, graph = _run_graph(con, "run")
    began = time.perf_counter()
    replay(graph)
    print(f"replay routine alone: {graph.size} nodes, {graph.src.size} edges, "
          f"{time.perf_counter() - began:.2f} s")
    print(con.sql("select edge_type, count(*) from intermediate.int_replay_edges_typed "
                  "group by 1 order by 1"))
    print(con.sql("select count(*) as rank_iterations, max(error_ratio) as max_error "
                  "from main.fct_step_replay"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--schedule", default="1f1b", choices=("1f1b", "interleaved"))
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--pp", type=int, default=8)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--tmp", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        if args.check:
            check(args.schedule, Path(folder) / "check")
        if args.scale:
            scale(args, Path(folder) / "scale")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
