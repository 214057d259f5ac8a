"""Efficiency on real traces: the GPU each trace ran on and its roofs.

The shared Kineto sets are ingested (one run each) into one warehouse and
built once; the tests read what the models made of them. The formulas
themselves have dbt unit tests beside the models
(models/intermediate/efficiency/_efficiency__models.yml), run by
tests/test_models_core.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import SHARED_DATA, ingest_and_build, query_warehouse
from tracehouse.dbt import EXIT_OK, run_dbt

pytestmark = pytest.mark.slow

KINETO = SHARED_DATA / "kineto"
#: Run name -> trace set.
SETS = {
    "dlrm_8rank": KINETO / "dlrm_8rank",
    "a100": KINETO / "single_rank" / "a100_nccl_pg_args.json.gz",
    "sampled": KINETO / "single_rank" / "sampled_128rank_job_rank-0.json.gz",
}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sets ingested (one run each) and built with the defaults."""
    yield ingest_and_build(SETS, tmp_path_factory.mktemp("efficiency") / "warehouse")


def test_gpu_product_is_matched_from_the_device_name(warehouse: Path) -> None:
    rows = query_warehouse(warehouse, """
        select run_id, gpu_name, gpu_product, gpu_match_source, count(*)
        from intermediate.int_trace_gpus_matched
        group by all
        order by run_id
    """)
    assert rows == [
        ("a100", "NVIDIA A100-PG509-200", "a100_sxm4_40gb", "device_name", 1),
        ("dlrm_8rank", "Tesla V100-SXM2-32GB", "v100_sxm2", "device_name", 8),
        # No deviceProperties in the file: no GPU, unless the var names one.
        ("sampled", None, None, None, 1),
    ]


def test_var_names_the_gpu_of_every_trace(warehouse: Path, tmp_path: Path) -> None:
    copy = tmp_path / "warehouse"
    shutil.copytree(warehouse, copy, ignore=shutil.ignore_patterns("dbt"))
    args = ["run", "--select", "int_trace_gpus_matched", "--vars", "{gpu_product: h100_sxm}"]
    assert run_dbt(args, copy) == EXIT_OK
    rows = query_warehouse(copy, """
        select run_id, gpu_product, gpu_match_source, bf16_tflops, hbm_tbps, count(*)
        from intermediate.int_trace_gpus_matched
        group by all
        order by run_id
    """)
    assert rows == [
        ("a100", "h100_sxm", "var", 989.4, 3.35, 1),
        ("dlrm_8rank", "h100_sxm", "var", 989.4, 3.35, 8),
        ("sampled", "h100_sxm", "var", 989.4, 3.35, 1),
    ]
