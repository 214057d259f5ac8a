"""``tracehouse findings``: what to change, ranked by time at stake, from ``fct_findings``.

Why: the marts hold every figure, but a user wants to know which ones matter
and what to do about them. ``fct_findings`` decides that (seed
``finding_rules``: thresholds, severity, the Megatron-LM flags); this module
only selects and orders its rows and prints them. Without ``--iteration``
each run's fired rules are summed over its iterations (time at stake and
step, so the share is a ratio of sums) and shown with the evidence of the
iteration where the most was at stake; rules that could not be evaluated
are listed with their reason, never left out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.query.lake_connection import connect
from tracehouse.query.result_formats import FORMATS, write_csv, write_json, write_table

__all__ = ["Findings", "load_findings", "print_findings", "query_findings"]

#: Filters shared by both queries: bound parameters, never text in the SQL.
_FILTER = "($run is null or run_id = $run) and ($iteration is null or iteration = $iteration)"

#: One iteration's fired findings, ranked.
ITERATION_SQL = f"""
select
    run_id, iteration, finding_rank as rank, rule_id, severity, subject,
    time_at_stake_ns, share_of_step, priced_by, evidence_mart, evidence_rank,
    evidence_pp_group_index, figure_name, figure, fires_when, threshold, baseline_name,
    baseline, history, recommendation, megatron_flags, doc_reference, shown_in
from fct_findings
where status = 'fired' and {_FILTER}
order by run_id, iteration, finding_rank
"""

#: Each run's fired rules over its iterations: sums, then the evidence of the
#: iteration with the most at stake.
RUN_SQL = f"""
with
steps as (
    select run_id, sum(step_ns) as run_step_ns, count(*) as iterations
    from fct_iteration_summary
    where iteration is not null and step_ns > 0 and ($run is null or run_id = $run)
    group by run_id
),
fired as (
    select
        *,
        row_number() over (
            partition by run_id, rule_id order by time_at_stake_ns desc, iteration
        ) as worst
    from fct_findings
    where status = 'fired' and {_FILTER}
),
summed as (
    select
        run_id, rule_id, count(*) as iterations_fired, sum(time_at_stake_ns) as time_at_stake_ns,
        max(case severity when 'high' then 3 when 'medium' then 2 else 1 end) as severity_order
    from fired
    group by run_id, rule_id
)
select
    summed.run_id,
    row_number() over (
        partition by summed.run_id order by summed.time_at_stake_ns desc, summed.rule_id
    ) as rank,
    summed.rule_id,
    case summed.severity_order when 3 then 'high' when 2 then 'medium' else 'low' end
        as severity,
    cast(summed.iterations_fired as varchar) || ' of ' || cast(steps.iterations as varchar)
        as iterations_fired,
    summed.time_at_stake_ns,
    cast(summed.time_at_stake_ns as double) / steps.run_step_ns as share_of_run,
    worst.iteration as worst_iteration, worst.subject, worst.priced_by, worst.evidence_mart,
    worst.evidence_rank, worst.evidence_pp_group_index, worst.figure_name, worst.figure,
    worst.fires_when, worst.threshold, worst.baseline_name, worst.baseline, worst.history,
    worst.recommendation, worst.megatron_flags, worst.doc_reference, worst.shown_in
from summed
inner join steps on summed.run_id = steps.run_id
inner join fired as worst
    on summed.run_id = worst.run_id and summed.rule_id = worst.rule_id and worst.worst = 1
order by summed.run_id, rank
"""

#: The rules that could not be evaluated, once per run and reason.
NOT_EVALUATED_SQL = f"""
select run_id, rule_id, reason, count(*) as iterations
from fct_findings
where status = 'not_evaluated' and {_FILTER}
group by run_id, rule_id, reason
order by run_id, rule_id
"""


@dataclass(frozen=True)
class Findings:
    """The findings asked for: ranked fired rows, and the rules not evaluated."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    not_evaluated: list[tuple[Any, ...]]


def query_findings(con: duckdb.DuckDBPyConnection, run: str | None = None,
                   iteration: int | None = None) -> Findings:
    """``fct_findings`` on an open connection: one iteration's ranked findings when
    ``iteration`` is given, else each run's summed over its iterations."""
    params = {"run": run, "iteration": iteration}
    cursor = con.execute(ITERATION_SQL if iteration is not None else RUN_SQL, params)
    columns = [column[0] for column in cursor.description]
    rows = cursor.fetchall()
    not_evaluated = con.execute(NOT_EVALUATED_SQL, params).fetchall()
    return Findings(columns=columns, rows=rows, not_evaluated=not_evaluated)


def load_findings(warehouse: Path, run: str | None = None,
                  iteration: int | None = None) -> Findings:
    """:func:`query_findings` on the warehouse, opened read-only.

    Raises:
        FileNotFoundError: the warehouse is not built.
        duckdb.CatalogException: the warehouse predates fct_findings.
    """
    place = Warehouse(Path(warehouse).resolve())
    if not place.database.is_file():
        raise FileNotFoundError(f"warehouse {place.root} is not built yet (run `tracehouse build`)")
    con = connect(place, restrict_files=True, lake_views=())
    try:
        return query_findings(con, run, iteration)
    finally:
        con.close()


def print_findings(warehouse: Path, run: str | None = None, iteration: int | None = None,
                   fmt: str = "table", out: TextIO | None = None, *, wide: bool = False) -> int:
    """Print the findings (table, csv or json); 1 when the warehouse cannot answer.

    The table format adds, below the table, each rule that was not evaluated
    and why; csv and json carry the fired findings only (the not-evaluated
    rows are ``fct_findings`` rows with status ``not_evaluated``).
    """
    out = sys.stdout if out is None else out
    if fmt not in FORMATS:
        print(f"error: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", file=sys.stderr)
        return 2
    try:
        found = load_findings(warehouse, run, iteration)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except duckdb.CatalogException:
        print(f"error: {warehouse} has no fct_findings: rebuild it with this version "
              "(`tracehouse build`)", file=sys.stderr)
        return 1
    if fmt == "csv":
        write_csv(found.columns, [found.rows], out)
    elif fmt == "json":
        write_json(found.columns, [found.rows], out)
    else:
        write_table(found.columns, [found.rows], out, wide=wide)
        for run_id, rule_id, reason, iterations in found.not_evaluated:
            out.write(f"not evaluated: {run_id} {rule_id} ({iterations} iteration"
                      f"{'s' if iterations != 1 else ''}): {reason}\n")
    return 0
