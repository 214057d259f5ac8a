"""Megatron structure on real megatron-core traces captured on CPU (no kernels).

The three runs in ../shared/data/kineto/megatron_cpu are ingested and built
once. Every forward and backward step of every microbatch must be found with
its phase and microbatch index, and the marts give CPU-side timings instead
of empty rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import SHARED_DATA
from tracehouse.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths
from tracehouse.warehouse import Warehouse

pytestmark = pytest.mark.slow

MEGATRON_CPU = SHARED_DATA / "kineto" / "megatron_cpu"
#: run -> (world size, traced iterations, forward/backward steps per rank and iteration).
#: The interleaved run has M x vpp = 4 x 2 steps per rank (vpp chunk not derived yet).
RUNS = {
    "tp2_pp2_dp2": (8, [3, 5], 4),
    "tp1_pp4_dp2": (8, [3], 8),
    "tp2_pp2_dp1_vpp2": (4, [3], 8),
}


def _query(warehouse: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(Warehouse(warehouse).database), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not MEGATRON_CPU.exists():
        pytest.skip(f"shared traces not found: {MEGATRON_CPU}")
    root = tmp_path_factory.mktemp("megatron_cpu") / "warehouse"
    for run in RUNS:
        result = ingest_paths([MEGATRON_CPU / run], warehouse=root, run=run, progress=False)
        assert not result.failed, result.failed
    assert run_dbt(["build"], root) == EXIT_OK
    yield root


def test_every_microbatch_step_is_found(warehouse: Path) -> None:
    rows = _query(
        warehouse,
        """
        select run_id, rank, iteration, phase, list(microbatch order by microbatch)
        from fct_microbatch_phases
        where phase in ('forward', 'backward') and microbatch is not null
        group by all
        """,
    )
    found: dict[tuple[str, int, int, str], list[int]] = {
        (run, rank, it, phase): mbs for run, rank, it, phase, mbs in rows
    }
    for run, (world, iterations, steps) in RUNS.items():
        for rank in range(world):
            for iteration in iterations:
                for phase in ("forward", "backward"):
                    key = (run, rank, iteration, phase)
                    assert found.get(key) == list(range(steps)), key


def test_cpu_only_traces_give_cpu_timings(warehouse: Path) -> None:
    [(kernels,)] = _query(warehouse, "select count(*) from fct_kernels")
    assert kernels == 0
    rows = _query(
        warehouse,
        """
        select timing_source, phase, min(wall_ns), bool_and(busy_ns <= wall_ns)
        from fct_microbatch_phases group by all
        """,
    )
    assert {source for source, *_ in rows} == {"cpu"}
    assert {phase for _, phase, *_ in rows} == {
        "forward", "backward", "pp_p2p", "dp_sync", "optimizer"
    }  # fmt: skip
    assert all(min_wall > 0 and within for _, _, min_wall, within in rows)


def test_optimizer_is_matched_on_the_function_not_the_package(warehouse: Path) -> None:
    """The original's `*optimizer*` matched every function under megatron/core/optimizer/."""
    rows = _query(
        warehouse,
        "select distinct function_name from int_cpu_steps_classified where phase = 'optimizer'",
    )
    names = {name for (name,) in rows}
    assert names and names <= {"step", "step_with_ready_grads", "_step"}
