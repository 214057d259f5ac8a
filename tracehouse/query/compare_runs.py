"""``tracehouse compare RUN_A RUN_B``: two runs' iteration summaries side by side.

Why: "did the last change help" is the question after most profiled runs.
The answer is ``fct_iteration_summary`` of both runs, iteration by
iteration, with the differences computed, not read off two reports.
Iterations are paired by their order within each run (a rerun is often
profiled at other step numbers), and both numbers are shown. The last row
compares the runs: ``fct_run_summary``'s figures (mean step over
iterations; shares as ratios of sums over all iterations, never a mean of
the iterations' ratios; the run's straggler), the same the report shows.
Numbers come from the marts only; this module adds nothing but the
pairing, the differences and the formatting
(:func:`tracehouse.query.sql.run_sql`: table, CSV or JSON).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.query.lake_connection import connect
from tracehouse.query.sql import run_sql

EXIT_USAGE = 2


def _literal(text: str) -> str:
    """``text`` as a SQL string literal (quotes doubled: run names come from users)."""
    return "'" + text.replace("'", "''") + "'"


def comparison_sql(run_a: str, run_b: str) -> str:
    """The query pairing the iterations of two runs (exact values; ms and % for reading)."""
    a, b = _literal(run_a), _literal(run_b)
    return f"""
with
a as (
    select *, row_number() over (order by iteration) as n
    from fct_iteration_summary where run_id = {a}
),
b as (
    select *, row_number() over (order by iteration) as n
    from fct_iteration_summary where run_id = {b}
),
paired as (
    select
        cast(coalesce(a.n, b.n) as varchar) as pair,
        a.iteration as iteration_a, b.iteration as iteration_b,
        a.step_ns as step_ns_a, b.step_ns as step_ns_b,
        a.exposed_communication_share as exposed_a, b.exposed_communication_share as exposed_b,
        a.bubble_ratio as bubble_a, b.bubble_ratio as bubble_b,
        a.slowest_rank as slowest_rank_a, b.slowest_rank as slowest_rank_b,
        a.straggler_rank as straggler_rank_a, b.straggler_rank as straggler_rank_b,
        a.worst_skew_ns as worst_skew_ns_a, b.worst_skew_ns as worst_skew_ns_b
    from a full outer join b on a.n = b.n
),
run_a as (select * from fct_run_summary where run_id = {a}),
run_b as (select * from fct_run_summary where run_id = {b}),
rows as (
    select * from paired
    union all
    select
        'run', null, null,
        run_a.mean_step_ns, run_b.mean_step_ns,
        run_a.exposed_communication_share, run_b.exposed_communication_share,
        run_a.bubble_ratio, run_b.bubble_ratio, null, null,
        run_a.straggler_rank, run_b.straggler_rank,
        (select avg(worst_skew_ns_a) from paired), (select avg(worst_skew_ns_b) from paired)
    from run_a full outer join run_b on true
)
select
    pair as "#",
    iteration_a as "iter A",
    iteration_b as "iter B",
    round(step_ns_a / 1e6, 3) as "step ms A",
    round(step_ns_b / 1e6, 3) as "step ms B",
    round((step_ns_b - step_ns_a) / 1e6, 3) as "step Δ ms",
    round(100 * (step_ns_b - step_ns_a) / nullif(step_ns_a, 0), 1) as "step Δ %",
    round(100 * exposed_a, 1) as "exposed comm % A",
    round(100 * exposed_b, 1) as "exposed comm % B",
    round(100 * bubble_a, 1) as "bubble % A",
    round(100 * bubble_b, 1) as "bubble % B",
    slowest_rank_a as "slowest rank A",
    slowest_rank_b as "slowest rank B",
    straggler_rank_a as "straggler A",
    straggler_rank_b as "straggler B",
    round(worst_skew_ns_a / 1e6, 3) as "worst skew ms A",
    round(worst_skew_ns_b / 1e6, 3) as "worst skew ms B"
from rows
order by pair = 'run', try_cast(pair as integer)
"""


def missing_runs(warehouse: Path, runs: list[str]) -> list[str] | str:
    """The runs without rows in ``fct_iteration_summary``, or why the warehouse cannot say."""
    place = Warehouse(Path(warehouse).resolve())
    if not place.database.is_file():
        return f"warehouse {place.root} is not built yet (run `tracehouse build`)"
    try:
        con = connect(place, restrict_files=True, lake_views=())
    except duckdb.Error as exc:
        return f"cannot open {place.database}: {exc}"
    try:
        present = {
            row[0] for row in con.execute(
                "select distinct run_id from fct_iteration_summary").fetchall()
        }
    except duckdb.CatalogException:
        return (f"{place.database} has no fct_iteration_summary: rebuild it with this "
                "version (`tracehouse build`)")
    finally:
        con.close()
    return [run for run in runs if run not in present]


def compare_runs(run_a: str, run_b: str, warehouse: Path, fmt: str = "table",
                 out: TextIO | None = None, *, wide: bool = False) -> int:
    """Print the two runs' iterations side by side; 2 when a run is unknown."""
    missing = missing_runs(warehouse, [run_a, run_b])
    if isinstance(missing, str):
        print(f"error: {missing}", file=sys.stderr)
        return 1
    if missing:
        print(f"error: no iterations for run(s) {', '.join(map(repr, missing))} in "
              "fct_iteration_summary; list the runs with: tracehouse sql "
              "\"select distinct run_id from fct_iteration_summary\"", file=sys.stderr)
        return EXIT_USAGE
    return run_sql(comparison_sql(run_a, run_b), warehouse, fmt=fmt, out=out, wide=wide)
