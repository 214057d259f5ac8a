"""Every var value the README or dbt_project.yml documents builds green, unit tests included.

A dbt unit test that assumes a var's default must pin it (`overrides: vars:`),
or a user following the README (`tracehouse build -- build --vars
'{kernel_time_unit_ns: 1000}'`, to compare with HTA) gets a failed build.
Each value runs the whole `dbt build` (models, data tests, unit tests) on
one small synthetic warehouse.
"""

from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT, Lake, build_lake
from tracehouse.cli import main

#: The documented values other than the defaults (README "compare with HTA" and
#: clock alignment; dbt_project.yml's clock_offset_mode modes; `tracehouse nsys --trim`;
#: the what-if models, which only this var builds).
DOCUMENTED = [
    "{kernel_time_unit_ns: 1000}",
    "{clock_offset_mode: first_step}",
    "{clock_offset_mode: none}",
    "{clock_offset_mode: collectives}",
    "{capture_window_start_ns: 0, capture_window_end_ns: 1000000000}",
    "{whatif: true}",
]

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
    code = main(["build", "--warehouse", str(lake.warehouse), "--", "build",
                 "--vars", variables])
    assert code == 0, f"dbt build --vars '{variables}' failed; see its output"
