"""Ground truth of exposed communication: transfer time no compute kernel hides.

Why the simulator states it: the findings' exposed-communication rules
(exposed_tp_comm, exposed_dp_comm) price what overlapping a group kind's
transfers would take off the step. The timing model knows every transfer's
interval (after the wait for its last peer, which is a straggler's cost, not
the overlap's) and every compute kernel's, so it can say exactly how much of
each kind ran with nothing to hide it; the warehouse must find the same from
the trace alone.
"""

from __future__ import annotations

import bisect

import numpy as np

from .config import GROUP_KIND
from .program import COLL, KERNEL, P2P, Tape
from .timing import StageTimes


def _merged(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """The union of intervals, as sorted disjoint (start, end) pairs."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _uncovered(start: float, end: float, islands: list[tuple[float, float]],
               island_ends: list[float]) -> float:
    """How much of [start, end) lies outside every island."""
    covered = 0.0
    k = bisect.bisect_right(island_ends, start)  # the first island ending after start
    while k < len(islands) and islands[k][0] < end:
        covered += max(0.0, min(end, islands[k][1]) - max(start, islands[k][0]))
        k += 1
    return max(0.0, end - start - covered)


def exposed_comm_us(tape: Tape, times: StageTimes, pos: int) -> dict[str, float]:
    """Per group kind (tp, dp, pp, ...: the kinds ``--slow-group`` names), the
    summed transfer time of its communication kernels that no compute kernel
    of the rank at position ``pos`` overlaps, in us."""
    compute = [i for i, op in enumerate(tape.ops) if op.kind == KERNEL]
    islands = _merged(times.start[compute, pos], times.end[compute, pos])
    island_ends = [end for _start, end in islands]
    out: dict[str, float] = {}
    for i, op in enumerate(tape.ops):
        if op.kind not in (COLL, P2P) or times.transfer_start is None:
            continue
        kind = "pp" if op.kind == P2P else GROUP_KIND.get(op.group, op.group)
        exposed = _uncovered(float(times.transfer_start[i, pos]), float(times.end[i, pos]),
                             islands, island_ends)
        out[kind] = out.get(kind, 0.0) + exposed
    return {kind: round(value, 3) for kind, value in sorted(out.items())}


__all__ = ["exposed_comm_us"]
