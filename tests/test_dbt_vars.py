"""Every var value the README or dbt_project.yml documents builds green, unit tests included.

A dbt unit test that assumes a var's default must pin it (`overrides: vars:`),
or a user following the README (`tracehouse build -- build --vars
'{kernel_time_unit_ns: 1000}'`, to compare with HTA) gets a failed build.
Each value runs the whole `dbt build` (models, data tests, unit tests) on
one small synthetic warehouse. The var `whatif`, on by default, is checked
through plain builds: on, then off (its tables dropped, the build still a
plain one), then on again.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO_ROOT, Lake, build_lake, query_warehouse
from tracehouse.cli import main

#: The documented values other than the defaults (README "compare with HTA" and
#: clock alignment; dbt_project.yml's clock_offset_mode modes; `tracehouse nsys --trim`;
#: the what-if models, on by default, left out and asked for again).
DOCUMENTED = [
    "{kernel_time_unit_ns: 1000}",
    "{clock_offset_mode: first_step}",
    "{clock_offset_mode: none}",
    "{clock_offset_mode: collectives}",
    "{capture_window_start_ns: 0, capture_window_end_ns: 1000000000}",
    "{whatif: false}",
    "{whatif: true}",
]
#: Tables of the what-if models (models/intermediate/whatif, models/marts/whatif).
WHATIF_TABLES = {"fct_what_if", "fct_step_replay", "fct_critical_path", "int_replay_nodes_listed",
                 "int_replay_ops_listed", "int_cuda_syncs_resolved", "int_replay_graph_walked"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return build_lake(tmp_path_factory.mktemp("vars_warehouse"))


def test_every_vars_example_of_the_readme_is_tested() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    examples = set(re.findall(r"--vars '(\{[^']*\})'", readme))
    assert examples and examples <= set(DOCUMENTED), examples - set(DOCUMENTED)
    project = (REPO_ROOT / "dbt_project.yml").read_text()
    for mode in ("collectives", "first_step", "none"):
        assert f"`{mode}`" in project and f"{{clock_offset_mode: {mode}}}" in DOCUMENTED


@pytest.mark.parametrize("variables", DOCUMENTED)
def test_documented_vars_build_with_unit_tests(lake: Lake, variables: str) -> None:
    # --full-refresh: with --vars alone a build stays plain (no unit tests); any other
    # dbt argument runs everything.
    code = main(["build", "--warehouse", str(lake.warehouse), "--", "build",
                 "--vars", variables, "--full-refresh"])
    assert code == 0, f"dbt build --vars '{variables}' failed; see its output"
    results = json.loads((lake.warehouse / "dbt" / "target" / "run_results.json").read_text())
    assert any(result["unique_id"].startswith("unit_test.")
               for result in results["results"]), "no unit test ran"


def _whatif_tables(lake: Lake) -> set[str]:
    return {name for (name,) in query_warehouse(
        lake.warehouse, "select table_name from information_schema.tables")} & WHATIF_TABLES


def _ran(lake: Lake) -> list[str]:
    results = json.loads((lake.warehouse / "dbt" / "target" / "run_results.json").read_text())
    return [result["unique_id"] for result in results["results"]]


def test_what_if_models_are_built_by_default_left_out_and_built_again(lake: Lake) -> None:
    """A plain build makes the what-if models; `--vars '{whatif: false}'` drops their
    tables (a stale replay would answer beside the new marts) in a build that stays
    plain (no unit test, no lake test: what the opt-out saves is not spent on them) and
    prices every finding directly; a build with the var back on makes them again."""
    warehouse = str(lake.warehouse)
    assert main(["build", "--warehouse", warehouse]) == 0
    assert _whatif_tables(lake) == WHATIF_TABLES

    assert main(["build", "--warehouse", warehouse, "--vars", "{whatif: false}"]) == 0
    assert _whatif_tables(lake) == set()
    ran = _ran(lake)
    assert "model.tracehouse.fct_findings" in ran
    assert not [node for node in ran if node.startswith("unit_test.")
                or node.split(".")[-1] in WHATIF_TABLES]
    assert query_warehouse(lake.warehouse, "select distinct priced_by from fct_findings "
                           "where status != 'not_evaluated'") in ([], [("direct",)])

    assert main(["build", "--warehouse", warehouse, "--vars", "{whatif: true}"]) == 0
    assert _whatif_tables(lake) == WHATIF_TABLES
