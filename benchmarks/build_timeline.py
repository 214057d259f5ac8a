"""Where one ``tracehouse build``'s wall time goes, from the files dbt leaves behind.

Reads a built warehouse's ``dbt/logs/dbt.log`` (debug level: build with
``DBT_LOG_LEVEL_FILE=debug``; ``tracehouse build`` writes it at info by default;
timestamps of dbt's start,
parse and node phase), ``dbt/target/run_results.json`` (each node's thread,
start, end and execution time) and ``manifest.json`` (who waits for whom) and
prints, as one table (benchmarks/README.md, "Where a full build's time goes
now"):

* dbt's phases: from ``Running with dbt`` to the parse's ``Found ...``
  line (adapter start and parse; a ``full parse`` says so), to the first
  node (graph, hooks, seed loading), the node phase, and the artifacts;
* the nodes by kind (models, data tests, hooks): how many, their summed
  execution time, and of it the SQL DuckDB ran (``SQL status: OK in S``
  summed per node, :mod:`dbt_statements`): the rest is dbt's per-node work;
* the threads: each thread's busy time in the node phase, and the DAG's
  critical path (longest chain of execution times, a model's data tests
  between it and its children, as ``dbt build`` orders them): when the
  critical path is close to the node phase, more threads cannot help.

Why: the build's fixed costs (dbt's start, parse, per-node work) and the
SQL are cut by different changes; this says which is which on one build.
Times under load are inflated alike; the CPU seconds of the process are
the harness's (``/usr/bin/time``), not this file's.

    python benchmarks/build_timeline.py <warehouse>
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from dbt_statements import _ENTRY, _STATEMENT, _STATUS, _THREAD, last_invocation, read_logs

_STAMP = re.compile(r"(\d\d:\d\d:\d\d\.\d+) ")


def _seconds(stamp: str) -> float:
    """Seconds since midnight of an ``HH:MM:SS.ffffff`` log stamp."""
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _iso_seconds(stamp: str) -> float:
    """Seconds since midnight of run_results' ISO timestamps (same clock as the log)."""
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return moment.hour * 3600 + moment.minute * 60 + moment.second + moment.microsecond / 1e6


def phase_marks(log_text: str) -> dict[str, float]:
    """Log times of dbt's phases in the last invocation of ``log_text``."""
    marks: dict[str, float] = {}
    patterns = {
        "start": "Running with dbt=",
        "parsed": "Found ",
        "full_parse": "Unable to do partial parsing",
        "nodes_done": "Finished running ",
        "end": "Command `cli ",
    }
    invocation = log_text.rfind("Running with dbt=")
    invocation = log_text.rfind("\n", 0, invocation) + 1 if invocation >= 0 else 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", log_text[invocation:])
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if not stamp:
            continue
        for name, needle in patterns.items():
            if name not in marks and needle in line:
                marks[name] = _seconds(stamp.group(1))
    return marks


def sql_seconds_by_node(log_text: str) -> dict[str, float]:
    """Seconds DuckDB took for each node's statements (``SQL status`` lines summed)."""
    sent: dict[str, str] = {}
    totals: dict[str, float] = defaultdict(float)
    for entry in _ENTRY.split(last_invocation(log_text)):
        thread_match = _THREAD.search(entry)
        thread = thread_match.group(1) if thread_match else ""
        statement = _STATEMENT.search(entry)
        if statement:
            sent[thread] = statement.group(1)
            continue
        status = _STATUS.search(entry)
        if status and thread in sent:
            totals[sent.pop(thread)] += float(status.group(1))
    return dict(totals)


def critical_path(results: list[dict], manifest: dict) -> tuple[float, list[str]]:
    """Longest chain of execution times through the nodes that ran, and its nodes.

    A node waits for the nodes it depends on, and (``dbt build``) for the
    data tests of those nodes that test nothing else."""
    ran = {r["unique_id"]: float(r["execution_time"]) for r in results}
    nodes = manifest["nodes"]
    tests_of: dict[str, list[str]] = defaultdict(list)
    for uid in ran:
        parents = [p for p in nodes.get(uid, {}).get("depends_on", {}).get("nodes", [])
                   if p in ran]
        if uid.startswith("test.") and len(parents) == 1:
            tests_of[parents[0]].append(uid)
    waits: dict[str, set[str]] = {}
    for uid in ran:
        parents = {p for p in nodes.get(uid, {}).get("depends_on", {}).get("nodes", [])
                   if p in ran}
        if not uid.startswith("test."):
            parents |= {t for p in parents for t in tests_of.get(p, [])}
        waits[uid] = parents
    finish: dict[str, tuple[float, list[str]]] = {}

    def longest(uid: str) -> tuple[float, list[str]]:
        if uid not in finish:
            before = max((longest(p) for p in waits[uid]), default=(0.0, []))
            finish[uid] = (before[0] + ran[uid], [*before[1], uid])
        return finish[uid]

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    return max((longest(uid) for uid in ran), default=(0.0, []))


def timeline(warehouse: Path) -> str:
    """The table for the last build of ``warehouse`` (see the module docstring)."""
    log_text = read_logs(warehouse / "dbt" / "logs")
    target = warehouse / "dbt" / "target"
    results = json.loads((target / "run_results.json").read_text())["results"]
    manifest = json.loads((target / "manifest.json").read_text())
    marks = phase_marks(log_text)
    sql = sql_seconds_by_node(log_text)

    starts = [_iso_seconds(r["timing"][0]["started_at"]) for r in results if r["timing"]]
    ends = [_iso_seconds(r["timing"][-1]["completed_at"]) for r in results if r["timing"]]
    first_node, last_node = min(starts), max(ends)
    rows = [("phase", "wall s", "")]
    parse_note = "full parse" if "full_parse" in marks else "partial parse"
    rows.append(("dbt start and parse", marks["parsed"] - marks["start"], parse_note))
    rows.append(("graph, on-run-start hooks (seeds)", first_node - marks["parsed"], ""))
    rows.append(("node phase (first to last node)", last_node - first_node, ""))
    rows.append(("on-run-end, artifacts", marks["end"] - last_node, ""))
    lines = [_table(rows)]

    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for result in results:
        uid = result["unique_id"]
        kind = uid.split(".")[0]
        kinds[kind][0] += 1
        kinds[kind][1] += float(result["execution_time"])
        kinds[kind][2] += sql.get(uid, 0.0)
    rows = [("nodes", "count", "execution s", "of it SQL s", "dbt's own s")]
    for kind, (count, execution, statements) in sorted(kinds.items()):
        rows.append((kind, count, execution, statements, execution - statements))
    lines.append(_table(rows))

    busy: dict[str, float] = defaultdict(float)
    for result in results:
        if result["timing"]:
            busy[result["thread_id"]] += (_iso_seconds(result["timing"][-1]["completed_at"])
                                          - _iso_seconds(result["timing"][0]["started_at"]))
    path_seconds, path = critical_path(results, manifest)
    rows = [("threads", "busy s", "of the node phase")]
    for thread, seconds in sorted(busy.items()):
        rows.append((thread, seconds, f"{seconds / (last_node - first_node):.0%}"))
    rows.append(("critical path", path_seconds,
                 " > ".join(uid.split(".")[-1] for uid in path if uid.startswith("model."))))
    lines.append(_table(rows))

    heavy = sorted(results, key=lambda r: -float(r["execution_time"]))[:15]
    rows = [("heaviest nodes", "execution s", "SQL s")]
    for result in heavy:
        uid = result["unique_id"]
        rows.append((uid.split(".")[-1] if uid.startswith("model.") else uid.split(".")[2],
                     float(result["execution_time"]), sql.get(uid, 0.0)))
    lines.append(_table(rows))
    return "\n\n".join(lines)


def _table(rows: list[tuple]) -> str:
    """A Markdown table; floats with two decimals."""
    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    head, *body = rows
    out = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in body]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(timeline(Path(sys.argv[1])))
