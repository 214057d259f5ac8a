"""Where a dbt build's database time goes, read from dbt's debug log.

dbt's file log (``<warehouse>/dbt/logs/dbt.log``), at debug level and coloured
(which this parser relies on; ``tracehouse build`` writes it at info unless
``DBT_LOG_LEVEL_FILE=debug`` is set: build with that first), names every statement it sends
(``On model.tracehouse.x: <sql>``) and, when DuckDB returns, ``SQL status:
OK in S seconds``. Summing those seconds by
kind of statement separates what the models compute from what each node
costs around it (the per-trace upkeep, the data tests, dbt's bookkeeping):
the breakdown behind the +1-iteration figures in benchmarks/README.md.
Seconds are summed over dbt's threads, so they can exceed the wall time.

    python benchmarks/dbt_statements.py <warehouse>/dbt/logs   # the last build in them
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

#: A log entry starts with dbt's colour reset and a timestamp.
_ENTRY = re.compile(r"\n(?=\x1b\[0m\d\d:\d\d:\d\d\.\d+ )")
_THREAD = re.compile(r"\[(Thread-\d+|MainThread)")
_STATEMENT = re.compile(
    r"On ((?:model|test|seed|operation|unit_test)\.[\w.]+): (.*)", re.S)
_STATUS = re.compile(r"SQL status: \S+ in ([0-9.]+) seconds")
_QUERY_COMMENT = re.compile(r"/\*.*?\*/", re.S)

#: Order in which kinds are printed.
KINDS = (
    "model tables and views",
    "per-trace inserts",
    "temporary tables",
    "delete+insert",
    "pending-trace lookups",
    "unloaded-trace deletes",
    "data tests",
    "seeds",
    "bookkeeping",
    "other",
)


def statement_kind(node: str, sql: str) -> str:
    """One of :data:`KINDS` for a statement of ``node``."""
    text = _QUERY_COMMENT.sub("", sql).strip().lower()
    first = " ".join(text.split()[:3])
    if node.startswith("test."):
        return "bookkeeping" if first in ("begin", "commit", "rollback") else "data tests"
    if node.startswith("seed."):
        return "seeds"
    if first.startswith(("begin", "commit", "rollback", "drop ", "alter ")):
        return "bookkeeping"
    if first.startswith("select") and (
        "information_schema." in text or " duckdb_" in text or first.startswith("select version")
    ):
        return "bookkeeping"  # dbt's catalog queries
    if re.match(r"create\s+(temporary|temp)\b", text):
        return "temporary tables"
    if first.startswith("create"):
        return "model tables and views"
    if first.startswith("insert into") and " by name" in text[:300]:
        return "per-trace inserts"
    if first.startswith("delete") and "not in" in text:
        return "unloaded-trace deletes"
    if first.startswith(("delete", "insert")):
        return "delete+insert"
    if first.startswith("select") and ("loaded.trace_id" in text or "glob(" in text):
        return "pending-trace lookups"
    return "other"


def last_invocation(log_text: str) -> str:
    """The part of a (possibly appended-to) dbt log written by its last invocation."""
    start = log_text.rfind("Running with dbt=")
    return log_text[start:] if start >= 0 else log_text


def statement_seconds(log_text: str) -> dict[str, tuple[int, float]]:
    """Statements and summed seconds by kind, for the last invocation in ``log_text``."""
    sent: dict[str, tuple[str, str]] = {}
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for entry in _ENTRY.split(last_invocation(log_text)):
        thread_match = _THREAD.search(entry)
        thread = thread_match.group(1) if thread_match else ""
        statement = _STATEMENT.search(entry)
        if statement:
            sent[thread] = (statement.group(1), statement.group(2))
            continue
        status = _STATUS.search(entry)
        if status and thread in sent:
            kind = statement_kind(*sent.pop(thread))
            totals[kind][0] += 1
            totals[kind][1] += float(status.group(1))
    return {kind: (int(totals[kind][0]), totals[kind][1]) for kind in KINDS if kind in totals}


def read_logs(log_dir: Path) -> str:
    """dbt's log with its rotated parts (``dbt.log.1`` is older than ``dbt.log``)."""
    rotated = [p for p in log_dir.glob("dbt.log.*") if p.suffix[1:].isdigit()]
    rotated.sort(key=lambda p: int(p.suffix[1:]), reverse=True)
    return "".join(p.read_text(errors="replace") for p in [*rotated, log_dir / "dbt.log"]
                   if p.is_file())


def describe(seconds: dict[str, tuple[int, float]]) -> str:
    """One line: ``kind S s (N)`` for each kind."""
    return ", ".join(f"{kind} {total:.1f} s ({count})" for kind, (count, total) in seconds.items())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(describe(statement_seconds(read_logs(Path(sys.argv[1])))))
