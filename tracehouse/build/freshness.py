"""Traces in the lake that the last build has not seen, for the commands that read a build.

Why: ``tracehouse sql``, ``report``, ``export`` and ``compare`` read the
last completed build, while ``tracehouse ingest`` writes only the lake. A
user who ingests and queries without building saw old figures, or "unknown
run" for a run that is right there in the lake, with nothing to say why.

Cheap on purpose: the lake side is a listing of ``lake/traces/run=*/``
(one commit marker per loaded trace, named by its trace id; no file is
read) and the build side the ``(run_id, trace_id)`` pairs of the built
``intermediate.int_traces_loaded`` (one row per trace; ``int_traces`` in a
warehouse built before issue 35 renamed it, until its next build drops it).
A warehouse without a database, or whose database lacks that table, is not
judged here (the commands say what they lack themselves).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracehouse.core.warehouse import Warehouse

if TYPE_CHECKING:
    import duckdb

#: The built table of loaded traces (models/intermediate/traces/int_traces_loaded.sql),
#: then its name in warehouses built before the rename (issue 35).
BUILT_TRACES = ("intermediate.int_traces_loaded", "intermediate.int_traces")
#: Runs named in the note before it says how many more there are.
_RUNS_SHOWN = 5


@dataclass
class Unbuilt:
    """Traces in the lake that the last build has not seen."""

    warehouse: Warehouse
    #: run -> how many of its traces the build lacks.
    traces_by_run: dict[str, int] = field(default_factory=dict)
    #: Runs of which the build holds at least one trace.
    built_runs: set[str] = field(default_factory=set)

    @property
    def traces(self) -> int:
        return sum(self.traces_by_run.values())

    def only_in_lake(self, run_id: str | None) -> bool:
        """True when ``run_id`` is in the lake and the build holds none of its traces."""
        return run_id in self.traces_by_run and run_id not in self.built_runs

    def _build(self) -> str:
        return f"run tracehouse build --warehouse {self.warehouse.root}"

    def note(self) -> str:
        """The line for stderr: how many traces, of which runs, and the command."""
        runs = sorted(self.traces_by_run)
        shown = ", ".join(runs[:_RUNS_SHOWN]) + (
            f" and {len(runs) - _RUNS_SHOWN} more" if len(runs) > _RUNS_SHOWN else "")
        return (f"note: the lake has {self.traces} trace(s) newer than the last build "
                f"(runs: {shown}); {self._build()}")

    def unbuilt_run(self, run_id: str) -> str:
        """The error for a run named on the command line that only the lake holds."""
        return (f"run {run_id!r} is in the lake but not in the last build "
                f"({self.traces_by_run[run_id]} trace(s) newer than the last build); "
                f"{self._build()}")


def lake_traces(warehouse: Warehouse) -> dict[str, set[str]]:
    """The committed traces of the lake by run: a listing of ``lake/traces/run=*/``."""
    found: dict[str, set[str]] = {}
    try:
        runs = list(os.scandir(warehouse.table_dir("traces")))
    except OSError:
        return found
    for run in runs:
        if not (run.is_dir() and run.name.startswith("run=")):
            continue
        try:
            names = [entry.name for entry in os.scandir(run.path)]
        except OSError:
            continue
        # Hidden temporaries (".x.tmp") and "_empty.parquet" are no traces.
        ids = {name.removesuffix(".parquet") for name in names
               if name.endswith(".parquet") and not name.startswith((".", "_"))}
        if ids:
            found[run.name.removeprefix("run=")] = ids
    return found


def _built_traces(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]] | None:
    """The (run_id, trace_id) pairs of the first of BUILT_TRACES the database has."""
    import duckdb

    for table in BUILT_TRACES:
        try:
            return con.execute(f"select distinct run_id, trace_id from {table}").fetchall()
        except duckdb.Error:
            continue
    return None


def unbuilt_traces(warehouse: Warehouse) -> Unbuilt | None:
    """What the lake holds beyond the last build, or None when it cannot be told
    (no database, no table of built traces in it, the database busy) or there is nothing."""
    import duckdb

    in_lake = lake_traces(warehouse)
    if not in_lake or not warehouse.database.is_file():
        return None
    try:
        con = duckdb.connect(str(warehouse.database), read_only=True)
    except duckdb.Error:
        return None
    try:
        built = _built_traces(con)
    finally:
        con.close()
    if built is None:
        return None
    seen: dict[str, set[str]] = {}
    for run_id, trace_id in built:
        seen.setdefault(run_id, set()).add(trace_id)
    unbuilt = Unbuilt(warehouse, built_runs=set(seen))
    for run_id, ids in in_lake.items():
        missing = len(ids - seen.get(run_id, set()))
        if missing:
            unbuilt.traces_by_run[run_id] = missing
    return unbuilt if unbuilt.traces_by_run else None
