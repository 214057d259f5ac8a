"""The README's promises: the test command is the one CI runs; every command has --help."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from report_warehouse import ReportWarehouse
from tracehouse.cli.main import build_parser, main


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```bash\n(.+?)\n```", readme)
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in ci.splitlines()


@pytest.mark.parametrize("command", [["ingest"], ["build"], ["sql"], ["demo"], ["report"],
                                     ["export", "perfetto"], ["export", "table"],
                                     ["serve"], ["whatif"]])
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


# --------------------------------------------------------------------------- examples

#: Commands of the README's examples that other tests run on their own data:
#: ingest and build made the warehouse below; report, demo and simulate have
#: end-to-end tests of their own (test_report_html.py, test_demo.py, ...).
NOT_RERUN = ("ingest", "build", "report", "demo", "simulate")


def _readme_examples() -> list[str]:
    """Every ``tracehouse …`` line in the README's bash blocks (set-up commands aside)."""
    readme = (REPO_ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.+?)\n```", readme, flags=re.S):
        for line in block.splitlines():
            if re.match(r"^(echo .+\| )?tracehouse ", line):
                lines.append(line)
    return lines


def _python_examples() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.+?)\n```", readme, flags=re.S)


@pytest.fixture(scope="session")
def dlrm_warehouse(report_wh: ReportWarehouse) -> Path:
    """The session's report warehouse (real ingest + dbt build), holding ``dlrm_8rank``."""
    report_wh.need("dlrm_8rank")
    return report_wh.root


def test_readme_has_examples() -> None:
    commands = {shlex.split(line.split("| ")[-1])[1] for line in _readme_examples()}
    assert {"sql", "export"} <= commands


@pytest.mark.slow
@pytest.mark.parametrize("line", [line for line in _readme_examples()
                                  if shlex.split(line.split("| ")[-1])[1] not in NOT_RERUN])
def test_readme_example_runs(line: str, dlrm_warehouse: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """Each example, as written, against a built warehouse at ./warehouse: exit 0, rows out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "warehouse").symlink_to(dlrm_warehouse)
    stdin_text, _, command = line.rpartition("| ")
    if stdin_text:
        text = shlex.split(stdin_text)[1] + "\n"
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    argv = shlex.split(command)[1:]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    if argv[0] == "sql":
        assert "error" not in captured.err
        if "ingest_errors" not in command:  # the traces loaded cleanly: no error rows
            assert not re.search(r"^\(0 rows\)$", captured.out, flags=re.M), captured.out
            assert captured.out.count("\n") >= 2
    else:
        written = [path for path in tmp_path.iterdir() if path.name != "warehouse"]
        assert written and all(path.stat().st_size > 0 for path in written)


@pytest.mark.slow
def test_readme_notebook_example_runs(dlrm_warehouse: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "warehouse").symlink_to(dlrm_warehouse)
    [snippet] = _python_examples()
    lines = snippet.splitlines()
    namespace: dict = {}
    exec("\n".join(lines[:-1]), namespace)  # noqa: S102 - the README's own example
    chart_line = lines[-1].split("#")[0].strip()
    charts = eval(chart_line, namespace, {})  # noqa: S307
    assert charts and all(chart.png.is_file() for chart in charts)
    frame = namespace["wh"].df("fct_rank_iterations", run_id="dlrm_8rank")
    assert len(frame) > 0 and str(frame["rank"].dtype) in ("Int64", "int64")
    namespace["wh"].close()
