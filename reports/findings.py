"""The report's first section: what to change, ranked by time at stake (``fct_findings``).

Why its own module: the page (:mod:`tracehouse.reports.html`) shows what
this returns and nothing else; the rows are ``fct_findings``' fired rules
summed over the run's iterations by :func:`tracehouse.query.findings.query_findings`
(the same rows ``tracehouse findings --run`` prints), so the report and the
command cannot disagree. Numbers are formatted here, never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracehouse.query.findings import query_findings

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class FindingLine:
    """One fired rule as the report shows it (plain text; the template escapes it)."""

    rank: int
    rule_id: str
    title: str
    severity: str
    iterations_fired: str
    time_at_stake_ns: int
    share_of_run: float
    subject: str
    evidence: str
    priced_by: str
    recommendation: str
    megatron_flags: str
    doc_reference: str
    shown_in: str


@dataclass(frozen=True)
class FindingsSection:
    """The fired rules, ranked, and the rules that could not be evaluated, with why."""

    lines: list[FindingLine]
    not_evaluated: list[tuple[str, str]]


def figure_text(value: float | None) -> str:
    """A figure as a reader wants it: thousands separated above 1,000, else 3 digits."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def gather_findings(con: duckdb.DuckDBPyConnection, run_id: str) -> FindingsSection | None:
    """``run_id``'s findings, or None when the warehouse has no fct_findings."""
    row = con.execute("select count(*) from information_schema.tables "
                      "where table_name = 'fct_findings'").fetchone()
    if not row or not row[0]:
        return None
    found = query_findings(con, run_id)
    # The rule's title, as the viewer shows it (a rule id alone reads as code).
    titles = dict(con.execute("select distinct rule_id, title from fct_findings "
                              "where run_id = ?", [run_id]).fetchall())
    records = [dict(zip(found.columns, values, strict=True)) for values in found.rows]
    lines = [
        FindingLine(
            rank=int(record["rank"]), rule_id=record["rule_id"],
            title=titles.get(record["rule_id"]) or record["rule_id"], severity=record["severity"],
            iterations_fired=record["iterations_fired"],
            time_at_stake_ns=int(record["time_at_stake_ns"]),
            share_of_run=float(record["share_of_run"]),
            subject=record["subject"] or "",
            evidence=(f"{record['evidence_mart']}: {record['figure_name']} = "
                      f"{figure_text(record['figure'])} ({record['fires_when']} "
                      f"{figure_text(record['threshold'])}), {record['baseline_name']} = "
                      f"{figure_text(record['baseline'])}, iteration {record['worst_iteration']}"
                      + (f"; {record['history']}" if record["history"] else "")),
            priced_by=record["priced_by"], recommendation=record["recommendation"],
            megatron_flags=record["megatron_flags"] or "", doc_reference=record["doc_reference"],
            shown_in=record["shown_in"],
        )
        for record in records
    ]
    not_evaluated = [(rule_id, reason) for _, rule_id, reason, _ in found.not_evaluated]
    return FindingsSection(lines=lines, not_evaluated=not_evaluated)
