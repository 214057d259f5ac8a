"""``tracehouse demo``: simulate a small Megatron run, load it, build, summarise.

Why: a new user should see the whole pipeline work in one command, before
they have traces of their own. The demo run is TP2 x PP4 x DP2 (16 ranks),
interleaved 1F1B with two model chunks per stage, two iterations, rank 5
slowed down 1.5x; the headline numbers let the straggler show up. It records
the ops' shapes (``record_shapes``), so the report shows how fast the GPU
work runs per phase, stage and model chunk (and the roofline) beside the MFU.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tracehouse.core.warehouse import Warehouse
from tracehouse.simulate import SimConfig, simulate_run

#: The demo's run: big enough per kernel for the GPU (not the CPU) to set the pace.
DEMO_CONFIG = SimConfig(
    tp=2, pp=4, dp=2, vpp=2, schedule="interleaved", microbatches=8, iterations=2,
    layers=16, hidden=2048, heads=16, seq_length=2048, vocab=32_000,
    stragglers=((5, 1.5),), seed=0, record_shapes=True,
)
DEFAULT_OUT = Path("demo_runs") / "megatron_tp2_pp4_dp2_vpp2"

# Headline numbers straight from the mart (fct_rank_iterations): per rank,
# summed over the traced iterations.
_PER_RANK_SQL = """
select
    rank,
    sum(kernel_count) as kernels,
    sum(compute_ns) / 1e6 as compute_ms,
    sum(communication_ns) / 1e6 as communication_ms,
    sum(exposed_communication_ns) / 1e6 as exposed_communication_ms,
    sum(idle_ns) / 1e6 as idle_ms
from fct_rank_iterations
where run_id = ?
group by rank
order by rank
"""


@dataclass
class DemoResult:
    """Where the demo put things and what it found."""

    run_dir: Path
    warehouse: Path
    run_id: str
    per_rank: list[dict] = field(default_factory=list)
    slowest_rank: int | None = None
    #: fct_run_summary's straggler: (rank, waiting it caused, ns), or None.
    straggler: tuple[int, int] | None = None
    report: Path | None = None


def run_demo(out: Path | None = None, warehouse: Path | str | None = None,
             config: SimConfig = DEMO_CONFIG, stream: TextIO | None = None,
             jobs: int | None = None) -> DemoResult:
    """Simulate ``config`` into ``out``, ingest it, ``dbt build``, print headline numbers.

    Raises whatever ingest or dbt raise (:class:`tracehouse.build.dbt.DbtBuildError`
    when the build fails); the CLI turns that into exit code 1.
    """
    from tracehouse.build.dbt import build_warehouse
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.reports.report import render_report

    stream = sys.stdout if stream is None else stream
    wh = Warehouse.at(warehouse)
    run_dir = Path(out or DEFAULT_OUT).resolve()
    run_id = run_dir.name

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    say(f"1/4 simulating {config.world} ranks x {config.iterations} iterations "
        f"(TP{config.tp} x PP{config.pp} x DP{config.dp}, {config.schedule}, "
        f"straggler rank {config.stragglers[0][0]} x{config.stragglers[0][1]}) → {run_dir}"
        if config.stragglers else f"1/4 simulating into {run_dir}")
    run = simulate_run(config, run_dir, jobs=jobs)
    say(f"    {len(run.trace_paths)} traces, {run.events:,} events, {run.seconds:.1f} s")

    say(f"2/4 ingesting into {wh.lake}")
    # The run folder as a user would pass it: discovery skips topology.json
    # and ground_truth.json as sidecars.
    result = ingest_paths([run.out_dir], warehouse=wh, run=run_id, jobs=jobs or 1, force=True,
                          progress=False, stream=stream)
    if result.failed:
        raise RuntimeError(f"ingest failed for {len(result.failed)} simulated trace(s): "
                           f"{result.failed[0]}")
    say(f"    loaded {len(result.loaded)} traces")

    say(f"3/4 building the warehouse (dbt build, 10-20 s) → {wh.database}")
    started = time.perf_counter()
    build_warehouse(wh.root, ["--quiet"])
    say(f"    built in {time.perf_counter() - started:.1f} s")

    report_dir = wh.reports / run_id
    say(f"4/4 rendering the report → {report_dir}")
    report = render_report(wh.root, report_dir, run_id=run_id, force=True, stream=stream)
    if report.failures:
        raise RuntimeError(f"{len(report.failures)} chart famil(ies) failed: "
                           f"{report.failures[0]}")

    demo = DemoResult(run_dir=run_dir, warehouse=wh.root, run_id=run_id,
                      report=report.index_html)
    demo.per_rank, demo.straggler = _per_rank(wh, run_id)
    _print_headline(demo, config, say)
    return demo


def _per_rank(wh: Warehouse, run_id: str) -> tuple[list[dict], tuple[int, int] | None]:
    """The per-rank rows and the run's straggler (fct_run_summary), as the report shows it."""
    import duckdb

    con = duckdb.connect(str(wh.database), read_only=True)
    try:
        cursor = con.execute(_PER_RANK_SQL, [run_id])
        columns = [c[0] for c in cursor.description]
        rows = [dict(zip(columns, row)) for row in cursor.fetchall()]
        straggler = con.execute(
            "select straggler_rank, straggler_wait_caused_ns from fct_run_summary "
            "where run_id = ? and straggler_rank is not null", [run_id]).fetchone()
        return rows, (int(straggler[0]), int(straggler[1])) if straggler else None
    finally:
        con.close()


def _print_headline(demo: DemoResult, config: SimConfig, say: Callable[[str], None]) -> None:
    rows = demo.per_rank
    if not rows:
        say("no kernels found in the warehouse")
        return
    median = statistics.median(r["compute_ms"] for r in rows)
    slowest = max(rows, key=lambda r: r["compute_ms"])
    demo.slowest_rank = int(slowest["rank"])
    say("")
    say(f"GPU time per rank over {config.iterations} iterations (fct_rank_iterations):")
    say(f"{'rank':>6} {'kernels':>8} {'compute ms':>11} {'comm ms':>9} {'exposed ms':>11} "
        f"{'idle ms':>9}")
    for r in rows:
        mark = "  ← most compute" if r is slowest else ""
        say(f"{r['rank']:>6} {int(r['kernels']):>8} {r['compute_ms']:>11.2f} "
            f"{r['communication_ms']:>9.2f} {r['exposed_communication_ms']:>11.2f} "
            f"{r['idle_ms']:>9.2f}{mark}")
    say("")
    say(f"rank {demo.slowest_rank} computes {slowest['compute_ms'] / median:.2f}x the median "
        "rank; its peers spend the difference waiting in NCCL kernels.")
    if demo.straggler is not None:
        rank, caused = demo.straggler
        say(f"straggler (fct_stragglers, as the report names it): rank {rank}, whose late "
            f"arrivals cost the other ranks {caused / 1e6:,.2f} ms of waiting.")
    say(f"warehouse: {demo.warehouse}  (database {demo.warehouse / 'tracehouse.duckdb'})")
    say(f"simulated run: {demo.run_dir}  (ground truth: {demo.run_dir / 'ground_truth.json'})")
    if demo.report is not None:
        say(f"report: {demo.report}")
    say(f"try: {suggested_command(demo.run_id, demo.warehouse)}")


def suggested_command(run_id: str, warehouse: Path) -> str:
    """A ``tracehouse sql`` line, ready to paste, whose first row is the straggler.

    Why compute, highest first: a straggler's own kernels take longer, while
    its peers' extra time is exposed communication (waiting for it) and idle
    is near zero everywhere, so ``order by idle_ns`` would show nothing. The
    exposed-communication column shows the peers paying for it. The run name
    is a SQL literal (quotes doubled) and the whole line is shell-quoted.
    """
    import shlex

    literal = "'" + run_id.replace("'", "''") + "'"
    query = (
        "select rank, round(sum(compute_ns) / 1e6, 2) as compute_ms, "
        "round(sum(exposed_communication_ns) / 1e6, 2) as exposed_comm_ms "
        f"from fct_rank_iterations where run_id = {literal} "
        "group by rank order by compute_ms desc limit 5"
    )
    return f"tracehouse sql {shlex.quote(query)} --warehouse {shlex.quote(str(warehouse))}"
