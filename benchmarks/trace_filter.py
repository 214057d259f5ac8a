"""How the per-trace filter's form scales with the number of pending traces.

An incremental per-trace model names the traces it must compute as literals
(``macros/per_trace.sql``, ``trace_filter``): an IN list up to
``var('max_in_list_traces')`` ids, a semi join on a VALUES list above. This
times the scan those models start with (the ``ProfilerStep#N`` slices of the
lake, as ``int_step_windows_resolved`` reads them) on a built warehouse, unfiltered
and with each form for lists of several lengths: the first ids are the
warehouse's traces (newest iteration first), padded with ids no trace has, as
a long list of new traces on a larger lake would be.

    python benchmarks/trace_filter.py --warehouse DIR [--sizes 16 256 768 2048 4096]

Prints the best of ``--repeat`` runs per (form, length), and each form's time
against the unfiltered scan in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb

SCAN = (
    "select count(*), sum(slices.ts_ns % 1000) from main.stg_lake__slices as slices "
    "where regexp_matches(slices.name, '^ProfilerStep#[0-9]+$') and ({where})"
)


def _quoted(ids: list[str]) -> list[str]:
    return ["'" + trace_id.replace("'", "''") + "'" for trace_id in ids]


def in_list(ids: list[str]) -> str:
    """The IN-list form of the filter."""
    return f"slices.trace_id in ({', '.join(_quoted(ids))})"


def values_join(ids: list[str]) -> str:
    """The VALUES semi-join form of the filter."""
    rows = ", ".join(f"({literal})" for literal in _quoted(ids))
    return (
        "slices.trace_id in (select pending_traces.trace_id from "
        f"(values {rows}) as pending_traces (trace_id))"
    )


def best_seconds(con: duckdb.DuckDBPyConnection, where: str, repeat: int) -> float:
    """The fastest of ``repeat`` runs of the scan with this filter."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        con.execute(SCAN.format(where=where)).fetchone()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    """Time the scan per filter form and list length; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", type=Path, required=True, help="a built warehouse")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 768, 2048, 4096])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    database = args.warehouse / "tracehouse.duckdb"
    if not database.exists():
        print(f"error: {database} does not exist: build the warehouse first", file=sys.stderr)
        return 2
    con = duckdb.connect(str(database), read_only=True)
    con.execute("set parquet_metadata_cache = true")  # as profiles.yml sets it
    traces = [
        trace_id
        for (trace_id,) in con.execute(
            "select trace_id from main.stg_lake__traces order by iteration desc, trace_id"
        ).fetchall()
    ]
    padding = [f"{index:016x}-absent" for index in range(max(args.sizes))]
    unfiltered = best_seconds(con, "true", args.repeat)
    print(f"{len(traces)} traces in the lake; unfiltered scan {unfiltered:.3f} s")
    print(f"{'ids':>6} {'IN list s':>10} {'VALUES s':>9} {'IN/all':>7} {'VALUES/all':>10}")
    for size in args.sizes:
        ids = (traces + padding)[:size]
        listed = best_seconds(con, in_list(ids), args.repeat)
        joined = best_seconds(con, values_join(ids), args.repeat)
        print(
            f"{size:>6} {listed:>10.3f} {joined:>9.3f} "
            f"{listed / unfiltered:>7.2f} {joined / unfiltered:>10.2f}"
        )
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
