"""Ingest and build take turns on the lake (tracehouse.core.publish.build_lock).

A build lists the loaded traces model by model, as each compiles; a trace
landing, or a changed trace's files being replaced, halfway through would
leave some per-trace tables with it and others without, or make the build
fail on a file that vanished. So an ingest takes the build lock (shared)
before its first write to the lake and keeps it to its end; a build holds
it exclusively. These tests hold the lock the way a running build does and
check that a real ingest waits for it, and only when it has something to
write.
"""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.core.publish import BUILD_LOCK, build_lock
from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.runner import ingest_paths

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

DLRM = SHARED_DATA / "kineto" / "dlrm_8rank"

needs_dlrm = pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared DLRM traces not found: {DLRM}")

WAITING = "waiting for the build of"


def _loaded(warehouse: Path) -> list[Path]:
    return sorted(Warehouse(warehouse).table_dir("traces").glob("run=*/*.parquet"))


def _ingest_in_thread(trace: Path, warehouse: Path) -> tuple[threading.Thread, list]:
    outcome: list = []
    thread = threading.Thread(
        target=lambda: outcome.append(ingest_paths([trace], warehouse, run="dlrm",
                                                   progress=False)),
        daemon=True)
    thread.start()
    return thread, outcome


@needs_dlrm
def test_ingest_waits_for_a_running_build_before_landing_traces(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    warehouse = tmp_path / "wh"
    trace = sorted(DLRM.glob("*.pt.trace.json.gz"))[0]
    with build_lock(warehouse):  # a build is running
        thread, outcome = _ingest_in_thread(trace, warehouse)
        deadline = time.monotonic() + 120
        said = ""
        while WAITING not in said and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.1)
            said += capfd.readouterr().err
        assert WAITING in said, f"ingest did not wait for the build; it said: {said!r}"
        # Parsed, waiting to commit: nothing of the trace is in the lake yet.
        assert _loaded(warehouse) == []
        assert thread.is_alive()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert len(outcome[0].loaded) == 1
    assert len(_loaded(warehouse)) == 1


@needs_dlrm
def test_an_ingest_of_unchanged_traces_does_not_wait_for_a_build(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    trace = sorted(DLRM.glob("*.pt.trace.json.gz"))[0]
    ingest_paths([trace], warehouse, run="dlrm", progress=False)
    with build_lock(warehouse):
        thread, outcome = _ingest_in_thread(trace, warehouse)
        thread.join(timeout=120)
        assert not thread.is_alive(), "an unchanged re-ingest waited for the build"
    assert outcome[0].loaded == []
    assert [why for _path, why in outcome[0].skipped] == ["already loaded, unchanged"]


def test_ingests_share_the_lock_and_a_build_waits_for_them(tmp_path: Path) -> None:
    """Shared holders (ingests, e.g. the shards of one load) coexist; an
    exclusive one (a build) cannot start while any of them holds it."""
    with build_lock(tmp_path, shared=True), build_lock(tmp_path, shared=True):
        with open(tmp_path / BUILD_LOCK, "a+b") as handle:
            with pytest.raises(BlockingIOError):
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / BUILD_LOCK, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
        fcntl.flock(handle, fcntl.LOCK_UN)


@needs_dlrm
def test_leftovers_of_a_killed_ingest_are_removed_only_between_builds(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Data files of a trace without its commit marker (an ingest killed mid-commit)
    are removed by the next ingest; a running build's staging views may be
    reading them, so that waits for the build too."""
    warehouse = tmp_path / "wh"
    traces = sorted(DLRM.glob("*.pt.trace.json.gz"))
    ingest_paths(traces[:1], warehouse, run="dlrm", progress=False)
    marker = _loaded(warehouse)[0]
    orphan = Warehouse(warehouse).table_dir("slices") / marker.parent.name / marker.name
    marker.unlink()  # as if killed before the marker was renamed into place
    assert orphan.exists()
    with build_lock(warehouse):
        thread, _outcome = _ingest_in_thread(traces[1], warehouse)
        deadline = time.monotonic() + 120
        said = ""
        while WAITING not in said and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.1)
            said += capfd.readouterr().err
        assert WAITING in said
        assert orphan.exists()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert not orphan.exists()
