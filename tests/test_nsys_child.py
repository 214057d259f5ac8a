"""Each Nsight GPU is loaded in a forked child (ingest/nsys/child.py): its result and its
errors come back to the parent as they would from a call in the same process."""

from __future__ import annotations

import os
import signal

import pytest

from tracehouse.ingest.nsys.child import ChildFailed, run_in_child
from tracehouse.ingest.trace_types import TraceError


def test_result_comes_back_from_another_process() -> None:
    pid, values = run_in_child(lambda: (os.getpid(), list(range(5))))
    assert pid != os.getpid()
    assert values == [0, 1, 2, 3, 4]


def test_trace_error_keeps_kind_message_and_hint() -> None:
    def fails() -> None:
        raise TraceError("empty", "the export has no CUDA kernels", "profile again")

    with pytest.raises(TraceError) as caught:
        run_in_child(fails)
    assert (caught.value.kind, caught.value.message, caught.value.hint) == (
        "empty", "the export has no CUDA kernels", "profile again")


def test_other_errors_come_back_as_their_text() -> None:
    def fails() -> None:
        raise KeyError("deviceId")

    with pytest.raises(ChildFailed, match="KeyError: 'deviceId'"):
        run_in_child(fails)


def test_memory_error_and_a_killed_child_are_out_of_memory() -> None:
    def runs_out() -> None:
        raise MemoryError

    with pytest.raises(MemoryError):
        run_in_child(runs_out)
    with pytest.raises(MemoryError, match="killed"):
        run_in_child(lambda: os.kill(os.getpid(), signal.SIGKILL))


def test_child_memory_does_not_stay_with_the_parent() -> None:
    """What the child allocates is gone with it: the parent's RSS does not grow by it."""
    def rss_kib() -> int:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))

    before = rss_kib()
    size = run_in_child(lambda: len(bytearray(256 * 1024 * 1024)))
    assert size == 256 * 1024 * 1024
    assert rss_kib() - before < 64 * 1024
