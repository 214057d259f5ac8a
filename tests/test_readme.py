"""The README's promises: the test command is the one CI runs; every command has --help."""

from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT
from tracehouse.cli import build_parser, main


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.+?)\n```", readme)
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in ci.splitlines()


@pytest.mark.parametrize("command", [["ingest"], ["build"], ["sql"], ["demo"], ["report"],
                                     ["export", "perfetto"], ["export", "table"]])
def test_every_subcommand_has_help(command: list[str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    assert "--warehouse" in capsys.readouterr().out


def test_simulate_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    # simulate writes trace files, not a warehouse: it has --out instead of --warehouse.
    assert main(["simulate", "--help"]) == 0
    assert "--out" in capsys.readouterr().out


def test_subcommands_are_the_documented_ones() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    for name in subparsers.choices:
        assert f"`tracehouse {name}" in readme


def test_usage_error_exit_code(tmp_path) -> None:
    assert main(["ingest", str(tmp_path / "missing"), "--warehouse", str(tmp_path)]) == 2
    assert main(["nope"]) == 2
