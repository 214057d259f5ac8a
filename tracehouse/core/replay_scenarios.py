"""A what-if scenario's weights on a replay graph: the one rule for "change these nodes".

Why a module of its own: a scenario changes a node's *duration* and
*delay*, and which of the graph's weights a duration is depends on the
node. A kernel or runtime call that nothing ends from outside has its
duration as ``work`` (end = start + work); a node that something ends (a
collective member ends after the last arrival, a host sync after the GPU
op it waited for) has ``work`` 0 and its duration as ``own``, the time
after that dependency (``replay.weigh``). The standard scenarios
(``int_whatif_work_scaled``, replayed by ``int_replay_graph_walked``)
and a user's own (``tracehouse whatif --scale``) both go through
``apply_scenario``, so a collective's transfer scales the same way in
both, and its arrival wait never does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .replay import END, ReplayGraph


def ended_from_outside(graph: ReplayGraph) -> np.ndarray:
    """Per node: True where an edge ends it (its duration is ``own``, not ``work``)."""
    ended = np.zeros(graph.size, dtype=bool)
    ended[graph.dst[graph.dst_point == END]] = True
    return ended


def durations(graph: ReplayGraph) -> np.ndarray:
    """Every node's duration as the replay weighs it: ``own`` where something
    ends the node from outside, else ``work``."""
    return np.where(ended_from_outside(graph), graph.own, graph.work)


def apply_scenario(graph: ReplayGraph, index: np.ndarray,
                   duration: np.ndarray | None = None,
                   delay: np.ndarray | None = None) -> ReplayGraph:
    """``graph`` with nodes ``index`` given new durations and/or delays (int64 ns).

    A negative entry keeps the graph's weight for that node (the SQL
    scenario's NULL). The duration goes to ``own`` where something ends
    the node from outside, else to ``work``; the other keeps its value.
    """
    index = np.asarray(index, dtype=np.int64)
    work, own, start_delay = graph.work.copy(), graph.own.copy(), graph.delay.copy()
    if duration is not None:
        duration = np.asarray(duration, dtype=np.int64)
        keep = duration >= 0
        nodes, values = index[keep], duration[keep]
        ended = ended_from_outside(graph)[nodes]
        own[nodes[ended]] = values[ended]
        work[nodes[~ended]] = values[~ended]
    if delay is not None:
        delay = np.asarray(delay, dtype=np.int64)
        keep = delay >= 0
        start_delay[index[keep]] = delay[keep]
    return dataclasses.replace(graph, work=work, own=own, delay=start_delay)


def scale_durations(graph: ReplayGraph, index: np.ndarray, factor: float) -> ReplayGraph:
    """``graph`` with nodes ``index``' durations multiplied by ``factor`` (>= 0),
    rounded to whole ns: a user's own scenario (``tracehouse whatif --scale``)."""
    if factor < 0:
        raise ValueError(f"a scale factor must be >= 0, not {factor}")
    index = np.asarray(index, dtype=np.int64)
    scaled = np.rint(durations(graph)[index] * factor).astype(np.int64)
    return apply_scenario(graph, index, duration=scaled)
