"""benchmarks/ingest_phases.py: each phase's CPU excludes the timed phases it calls,
and a real ingest is split into phases that add up to its total.

Why: the table chooses what to make faster; a phase charged with its callees'
time (the Parquet write inside the lake write, say) would point at the wrong one.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from conftest import SHARED_DATA

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "ingest_phases.py"
spec = importlib.util.spec_from_file_location("bench_ingest_phases", BENCH)
phases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(phases)


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_phase_excludes_the_phases_it_calls() -> None:
    clock = phases.PhaseClock()
    inner = clock.wrap("inner", lambda: _spin(0.05))

    def outer_body() -> None:
        _spin(0.02)
        inner()

    clock.wrap("outer", outer_body)()
    assert 0.05 <= clock.seconds["inner"] < 0.065
    assert 0.02 <= clock.seconds["outer"] < 0.035


SAMPLED = SHARED_DATA / "kineto" / "single_rank" / "sampled_128rank_job_rank-0.json.gz"


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLED.is_file(), reason=f"shared trace {SAMPLED} not found")
def test_an_ingest_splits_into_phases_that_add_up() -> None:
    phases._remember()
    got = phases.measure([SAMPLED], repeat=1)
    named = {phase for _, _, phase in phases.PHASES}
    from tracehouse.ingest.kineto.engine import KinetoEngine, native_decoder

    assert got["Parquet write"] > 0 and got["gunzip"] > 0
    native = native_decoder(KinetoEngine.NATIVE)
    assert (got["scan (C)"] > 0) == (native is KinetoEngine.SCANNER)
    assert abs(sum(v for k, v in got.items() if k in named or k == phases.REST)
               - got["total"]) < 1e-9
    # Every wrapper is taken off again: the next ingest in this process is untimed.
    from tracehouse.ingest import lake

    assert lake.write_parquet_tmp is phases._ORIGINALS[("tracehouse.ingest.lake",
                                                        "write_parquet_tmp")]
