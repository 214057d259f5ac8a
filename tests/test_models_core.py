"""Core models (kernels, interval merging, overlap) on a simulated Megatron run.

One simulated TP2 x PP2 x DP2 run (2 iterations, one straggler) is ingested
and built once for the module; tests only read it. The HTA cross-check on real
traces is in test_models_hta.py; the tricky SQL has dbt unit tests in the
models' YAML (run by every build).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlglot

from conftest import query_warehouse
from tracehouse.build.dbt import DBT_ARTIFACTS_DIR, EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, simulate_run

pytestmark = pytest.mark.slow

RUN = "sim_tp2_pp2_dp2"
ITERATIONS = [3, 4]
WORLD = 8
MICROBATCHES = 4
CORE_MODELS = [
    "int_process_groups_resolved",
    "int_ranks_placed",
    "int_process_groups_matched",
    "int_step_windows_resolved",
    "int_slices_contextualized",
    "int_kernel_names_classified",
    "int_kernel_phases_matched",
    "int_kernels_classified",
    "int_kernel_intervals_merged",
    "int_rank_iterations_swept",
    "int_stage_work_merged",
    "int_cpu_steps_classified",
    "int_microbatch_steps_chunked",
    "int_cpu_collectives_classified",
    "fct_cpu_steps",
    "fct_microbatch_phases",
    "fct_pipeline_bubbles",
    "fct_cpu_collectives",
    "fct_kernels",
    "fct_rank_iterations",
    "fct_kernel_summary",
]
#: Engines the models must transpile to (ARCHITECTURE.md, "Scale").
PORTABLE_TO = ["spark", "trino"]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("core")
    config = SimConfig(
        layers=4, hidden=256, heads=8, seq_length=256, vocab=1024,
        tp=2, pp=2, dp=2, microbatches=MICROBATCHES, iterations=len(ITERATIONS),
        first_iteration=ITERATIONS[0], stragglers=((1, 1.3),), gpus_per_node=2,
    )  # fmt: skip
    run = simulate_run(config, root / "sim")
    result = ingest_paths([run.out_dir], warehouse=root / "warehouse", run=RUN, progress=False)
    assert not result.failed, result.failed
    assert run_dbt(["build"], root / "warehouse") == EXIT_OK
    yield root / "warehouse"


def _run_results(warehouse: Path) -> dict[str, str]:
    path = warehouse / DBT_ARTIFACTS_DIR / "target" / "run_results.json"
    results = json.loads(path.read_text())["results"]
    return {result["unique_id"]: result["status"] for result in results}


def test_build_runs_every_core_model_and_test(warehouse: Path) -> None:
    statuses = _run_results(warehouse)
    assert {f"model.tracehouse.{name}" for name in CORE_MODELS} <= set(statuses)
    assert all(status in {"pass", "success"} for status in statuses.values())
    # A plain `tracehouse build` leaves the unit tests, the lake's own
    # invariants (tag `lake`) and the intermediate models' tests (tag
    # `internal`) off its critical path, and keeps the marts' tests ...
    assert not [uid for uid in statuses if uid.startswith("unit_test.")]
    assert any(uid.startswith("test.tracehouse.") and "fct_kernels" in uid for uid in statuses)
    assert not [uid for uid in statuses if uid.startswith("test.")
                and ("stg_lake__" in uid or "_int_" in uid)]


def test_unit_and_internal_tests_pass(warehouse: Path) -> None:
    """... so the suite runs every dbt unit test (given rows -> expected rows) and every
    test of an intermediate model itself."""
    assert run_dbt(["test", "--select", "test_type:unit", "tag:internal"], warehouse) == EXIT_OK
    statuses = _run_results(warehouse)
    unit_tests = [uid for uid in statuses if uid.startswith("unit_test.")]
    assert len(unit_tests) >= 20, unit_tests
    # The one step and its parts, the run's timing source, and the peer rule.
    assert {"unit_test.tracehouse.int_rank_steps_swept.step_parts_gpu_and_cpu_windows",
            "unit_test.tracehouse.int_rank_steps_timed.run_timing_source_decided_once",
            "unit_test.tracehouse.fct_rank_summary.rank_summary_peer_rule"} <= set(unit_tests)
    internal = [uid for uid in statuses if uid.startswith("test.") and "_int_" in uid]
    assert len(internal) >= 20, internal
    assert all(statuses[uid] == "pass" for uid in [*unit_tests, *internal])


def test_every_rank_has_every_iteration(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        "select rank, list(iteration order by iteration) from fct_rank_iterations "
        "group by rank order by rank",
    )
    assert rows == [(rank, ITERATIONS) for rank in range(WORLD)]
    [(outside,)] = query_warehouse(
        warehouse, "select count(*) from fct_kernels where iteration is null")
    assert outside == 0


def test_breakdown_adds_up_and_has_every_kind(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select rank, iteration, span_ns, compute_ns, communication_ns, overlap_ns,
               exposed_communication_ns, exposed_memory_ns, idle_ns, overlap_ratio
        from fct_rank_iterations
        """,
    )
    for rank, it, span, comp, comm, overlap, exp_comm, exp_mem, idle, ratio in rows:
        assert comp + exp_comm + exp_mem + idle == span, (rank, it)
        assert comp > 0 and comm > 0, (rank, it)
        assert 0 <= overlap <= min(comp, comm)
        assert ratio == pytest.approx(overlap / comm)


def test_straggler_has_more_compute(warehouse: Path) -> None:
    """Rank 1 runs its kernels 1.3x slower than its TP peer rank 0 (same stage, same work)."""
    rows = dict(
        query_warehouse(
            warehouse, "select rank, sum(compute_ns) from fct_rank_iterations group by rank")
    )
    assert rows[1] > 1.2 * rows[0]


def test_summary_covers_every_kernel(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select summary.rank, summary.kernels, summary.share, kernels.kernels
        from (
            select rank, sum(kernel_count) as kernels, sum(share_ratio) as share
            from fct_kernel_summary group by rank
        ) as summary
        inner join (
            select rank, count(*) as kernels from fct_kernels group by rank
        ) as kernels on summary.rank = kernels.rank
        """,
    )
    assert len(rows) == WORLD
    for rank, summarized, share, counted in rows:
        assert summarized == counted, rank
        assert share == pytest.approx(1.0), rank


def test_communication_kernels_are_nccl(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        "select kind, bool_and(name ilike '%nccl%'), count(*) from fct_kernels group by kind",
    )
    by_kind = {kind: (all_nccl, n) for kind, all_nccl, n in rows}
    assert by_kind["communication"][0] is True
    assert by_kind["compute"][1] > 0


def test_every_microbatch_has_its_forward_and_backward(warehouse: Path) -> None:
    """Per rank and iteration: M forward and M backward microbatches, each with compute."""
    rows = query_warehouse(
        warehouse,
        """
        select rank, iteration, phase, list(microbatch order by microbatch)
        from fct_microbatch_phases
        where phase in ('forward', 'backward') and microbatch is not null and compute_ns > 0
        group by rank, iteration, phase
        """,
    )
    assert len(rows) == WORLD * len(ITERATIONS) * 2
    assert all(mbs == list(range(MICROBATCHES)) for *_, mbs in rows)


def test_every_kernel_has_one_phase(warehouse: Path) -> None:
    rows = dict(query_warehouse(
        warehouse, "select phase, count(*) from fct_kernels group by phase"))
    assert None not in rows
    assert {"forward", "backward", "optimizer", "pp_p2p", "dp_sync"} <= set(rows)
    [(phased, kernels)] = query_warehouse(
        warehouse,
        "select (select sum(kernel_count) from fct_microbatch_phases), "
        "(select count(*) from fct_kernels)",
    )
    assert phased == kernels


def test_communication_kernels_have_their_group(warehouse: Path) -> None:
    rows = query_warehouse(
        warehouse,
        """
        select phase, list(distinct comm_group_kind order by comm_group_kind)
        from fct_kernels where kind = 'communication' group by phase
        """,
    )
    groups = dict(rows)
    assert groups["forward"] == ["tp"] and groups["backward"] == ["tp"]
    assert groups["pp_p2p"] == ["pp"]
    assert "dp" in groups["dp_sync"]
    [(missing,)] = query_warehouse(
        warehouse,
        "select count(*) from fct_kernels where kind = 'communication' and comm_group_kind is null",
    )
    assert missing == 0


@pytest.mark.parametrize("dialect", PORTABLE_TO)
def test_core_models_transpile(warehouse: Path, dialect: str) -> None:
    """Compiled core models parse as DuckDB SQL and transpile to other engines."""
    compiled = warehouse / DBT_ARTIFACTS_DIR / "target" / "compiled" / "tracehouse" / "models"
    for name in CORE_MODELS:
        # Tests compile under <folder>/<file>.yml/; the model is beside its yml.
        [path] = [p for p in compiled.rglob(f"{name}.sql") if p.parent.suffix != ".yml"]
        sql = path.read_text()
        out = sqlglot.transpile(sql, read="duckdb", write=dialect,
                                unsupported_level=sqlglot.ErrorLevel.RAISE)  # fmt: skip
        assert out and out[0].strip(), name
