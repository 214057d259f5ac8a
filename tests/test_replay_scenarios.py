"""apply_scenario / scale_durations (tracehouse.core.replay_scenarios) on a graph
small enough to replay by hand: two ranks, one kernel each, then an
all-reduce whose members end 10 ns after the last arrival."""

from __future__ import annotations

import numpy as np
import pytest

from tracehouse.core.replay import END, START, replay, weigh
from tracehouse.core.replay_scenarios import apply_scenario, durations, scale_durations

# Nodes: 0 root, 1 kernel on rank 0 (0-10), 2 kernel on rank 1 (0-30),
# 3 and 4 the all-reduce's members (rank 0 arrives at 10, rank 1 at 30; both
# end at 40), 5 the instance (the last arrival, 30).
MEASURED_START = np.array([0, 0, 0, 10, 30, 30])
MEASURED_END = np.array([0, 10, 30, 40, 40, 30])
EDGES = [  # (src, src_point, dst, dst_point)
    (0, END, 1, START), (0, END, 2, START),
    (1, END, 3, START), (2, END, 4, START),
    (3, START, 5, START), (4, START, 5, START),
    (5, END, 3, END), (5, END, 4, END),
]


@pytest.fixture
def graph():
    src, src_point, dst, dst_point = (np.array(column) for column in zip(*EDGES))
    return weigh(MEASURED_START, MEASURED_END, np.array([1, 0, 0, 0, 0, 0], dtype=bool),
                 src, src_point, dst, dst_point)


def test_durations_are_work_or_the_time_after_the_last_arrival(graph) -> None:
    assert durations(graph).tolist() == [0, 10, 30, 10, 10, 0]


def test_a_member_transfer_changes_and_its_arrival_wait_stays(graph) -> None:
    """Rank 0's member still waits for rank 1's arrival at 30; only the 10 ns
    transfer after it becomes 4."""
    start, end = replay(apply_scenario(graph, np.array([3, 4]), duration=np.array([4, 4])))
    assert start.tolist() == [0, 0, 0, 10, 30, 30]
    assert end.tolist() == [0, 10, 30, 34, 34, 30]


def test_negative_keeps_the_weight_and_delay_is_applied(graph) -> None:
    scenario = apply_scenario(graph, np.array([2, 3]), duration=np.array([-1, 0]),
                              delay=np.array([5, -1]))
    start, end = replay(scenario)
    assert start[2] == 5 and end[2] == 35  # delayed 5, work kept at 30
    # The last arrival is now at 35; rank 0's transfer is 0, rank 1's kept at 10.
    assert (end[3], end[4]) == (35, 45)
    assert replay(graph)[1].tolist() == MEASURED_END.tolist()  # the graph itself unchanged


def test_scaling_the_slow_rank_moves_the_collective(graph) -> None:
    start, end = replay(scale_durations(graph, np.array([2]), 0.5))
    assert end[2] == 15 and start[5] == 15
    assert end[3] == end[4] == 25
    with pytest.raises(ValueError, match=">= 0"):
        scale_durations(graph, np.array([2]), -1.0)
