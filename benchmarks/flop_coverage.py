"""How much of each trace's compute time has a FLOP model, and which ops lack one.

Why: the efficiency figures (achieved TFLOP/s, the roofline) speak only for
the kernels whose launching op has a FLOP or byte model (seed
op_flop_models, macros/op_flops.sql). Before quoting them for a trace, read
how much of its compute time they cover, and which ops make up the rest:
those are the next models to write. Issue 32 asks for this figure per
shared trace recorded with shapes.

Usage::

    tracehouse ingest ../shared/data/kineto/dlrm_8rank --warehouse /tmp/wh
    tracehouse build --warehouse /tmp/wh
    python benchmarks/flop_coverage.py --warehouse /tmp/wh [--top 5]

It reads the marts only: coverage per trace is fct_kernels' compute kernels
of that trace, the time of those with FLOPs over all of their time (the
same ratio of sums as fct_op_efficiency.flop_coverage_ratio), and the
uncovered ops are the launching ops (fct_kernels.cpu_op_name, with
flops_null_reason) of the rest, by time. A trace recorded with shapes but
without GPU kernels (a CPU-only capture) is listed with the reason.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

_TRACES_SQL = """
    select
        traces.run_id,
        traces.rank,
        traces.trace_id,
        traces.path,
        count(kernels.slice_id) as kernels,
        coalesce(sum(kernels.dur_ns), 0) as compute_ns,
        coalesce(sum(kernels.dur_ns) filter (where kernels.flops is not null), 0) as modelled_ns
    from intermediate.int_traces_loaded as traces
    left join fct_kernels as kernels
        on traces.trace_id = kernels.trace_id and kernels.kind = 'compute'
    where traces.has_op_shapes
    group by all
    order by traces.run_id, traces.rank, traces.path
"""
_UNCOVERED_SQL = """
    select
        trace_id,
        coalesce(cpu_op_name, '(no CPU op)') as op,
        flops_null_reason,
        sum(dur_ns) as dur_ns
    from fct_kernels
    where kind = 'compute' and flops is null and trace_id = ?
    group by all
    order by dur_ns desc, op
    limit ?
"""


@dataclass
class TraceCoverage:
    """One trace recorded with shapes: its compute time and the part with a FLOP model."""

    run_id: str
    rank: int
    path: str
    kernels: int
    compute_ns: int
    modelled_ns: int
    #: (op, null reason, ns) of the longest uncovered ops.
    uncovered: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def coverage_ratio(self) -> float | None:
        """modelled_ns / compute_ns, None without compute kernels."""
        return self.modelled_ns / self.compute_ns if self.compute_ns else None


def trace_coverage(database: Path, top: int = 5) -> list[TraceCoverage]:
    """Coverage and the ``top`` longest uncovered ops of every trace recorded with shapes."""
    con = duckdb.connect(str(database), read_only=True)
    try:
        result = []
        for run_id, rank, trace_id, path, kernels, compute_ns, modelled_ns in con.execute(
                _TRACES_SQL).fetchall():
            uncovered = [(op, reason, int(ns)) for _trace, op, reason, ns
                         in con.execute(_UNCOVERED_SQL, [trace_id, top]).fetchall()]
            result.append(TraceCoverage(run_id, rank, path, kernels, int(compute_ns),
                                        int(modelled_ns), uncovered))
        return result
    finally:
        con.close()


def format_report(rows: list[TraceCoverage]) -> str:
    """One line per trace, its uncovered ops indented below it; a run's traces without
    compute kernels on one line; each run's coverage over all its traces (a ratio of
    sums)."""
    lines = []
    runs = sorted({row.run_id for row in rows})
    for run in runs:
        traces = [row for row in rows if row.run_id == run]
        cpu_only = [row for row in traces if row.coverage_ratio is None]
        if cpu_only:
            lines.append(f"{run}: {len(cpu_only)} trace(s) recorded with shapes but without "
                         "GPU compute kernels (a CPU-only capture): no coverage to give")
        measured = [row for row in traces if row.coverage_ratio is not None]
        if measured:
            modelled = sum(row.modelled_ns for row in measured)
            compute = sum(row.compute_ns for row in measured)
            lines.append(f"{run}: {100 * modelled / compute:.1f} % of {compute / 1e6:.2f} ms "
                         f"compute over {len(measured)} trace(s) has a FLOP model")
        lines.extend(_trace_lines(measured))
    return "\n".join(lines)


def _trace_lines(rows: list[TraceCoverage]) -> list[str]:
    lines = []
    for row in rows:
        name = Path(row.path).name
        assert row.coverage_ratio is not None
        lines.append(
            f"  rank {row.rank} {name}: {100 * row.coverage_ratio:.1f} % of "
            f"{row.compute_ns / 1e6:.2f} ms compute ({row.kernels} kernels) has a FLOP model")
        for op, reason, ns in row.uncovered:
            lines.append(f"      {ns / 1e6:8.3f} ms  {100 * ns / row.compute_ns:5.1f} %  "
                         f"{op}  ({reason})")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the coverage of every trace recorded with shapes in a built warehouse."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--top", type=int, default=5, help="uncovered ops listed per trace")
    args = parser.parse_args(argv)
    database = args.warehouse / "tracehouse.duckdb"
    if not database.is_file():
        print(f"error: {database} does not exist; run tracehouse build --warehouse "
              f"{args.warehouse} first", file=sys.stderr)
        return 2
    print(format_report(trace_coverage(database, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
