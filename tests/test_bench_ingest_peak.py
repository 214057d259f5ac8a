"""benchmarks/ingest.py's parent-memory figure is the measured process's own peak.

Why: ``ru_maxrss`` of an exec'd child carries the peak of the image it
replaced (the harness at fork time), which put one floor under both tools'
figures; the harness now reads the child's ``VmHWM`` instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "ingest.py"

#: Loads the harness as a module and prints (own peak, ru_maxrss) in MiB.
_CHILD = f"""
import importlib.util, resource, sys
spec = importlib.util.spec_from_file_location("bench_ingest", {str(BENCH)!r})
module = importlib.util.module_from_spec(spec)
sys.modules["bench_ingest"] = module
spec.loader.exec_module(module)
carried = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(module._own_peak_rss_kib() // 1024, carried // 1024)
"""

BIG_MIB = 300


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux /proc")
def test_child_peak_leaves_out_the_forking_parent() -> None:
    """A child forked by a process holding 300 MiB reports its own peak, far below."""
    ballast = bytearray(BIG_MIB * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page: resident
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True)
    own, carried = map(int, out.stdout.split())
    del ballast
    assert carried >= BIG_MIB  # what ru_maxrss says: the parent's pages
    assert own < BIG_MIB / 2  # the child itself: an interpreter and the harness's imports
