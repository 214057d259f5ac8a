"""No input of any command ends in a traceback: empty, missing and malformed arguments.

Why: a person who mistypes an argument should read what is wrong and how to
fix it, never a Python stack. Every subcommand of the real parser is fed
every value-taking option empty, then no arguments at all, then a list of
malformed values (paths that are files, folders that do not exist, numbers
out of range, a warehouse that is not one). Each case must end in
:func:`tracehouse.cli.main` returning 1 or 2 with an ``error:`` line on
stderr: no exception escapes and nothing prints a traceback. The commands
run with the working folder in ``tmp_path``, so a check that failed to stop
a command still writes nowhere else.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tracehouse.cli.main import build_parser, main

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


def _subcommands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every leaf subcommand of the real parser, e.g. ``("export", "table")``."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(prefix: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[prefix] = parser
            return
        for name, child in subs[0].choices.items():
            walk((*prefix, name), child)

    walk((), build_parser())
    return found


#: Arguments that make each subcommand valid apart from the one being broken
#: (``{tmp}`` is the test's folder; the warehouse there is empty).
VALID = {
    ("ingest",): ["{tmp}/traces"],
    ("build",): [],
    ("sql",): ["select 1"],
    ("compare",): ["run_a", "run_b"],
    ("simulate",): ["--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
                    "--iterations", "1", "--out", "{tmp}/sim"],
    ("topology",): ["--world", "1", "--tp", "1", "--pp", "1"],
    ("report",): [],
    ("export", "perfetto"): ["--run", "r", "--out", "{tmp}/x.pftrace"],
    ("export", "table"): ["traces", "--out", "{tmp}/x.csv"],
    ("demo",): [],
    ("nsys",): ["summary", "{tmp}/capture.sqlite"],
    ("commtrace",): ["--tp", "1", "--pp", "1", "--dp", "1", "--model", "small",
                     "--out", "{tmp}/ct"],
    ("serve",): [],
    ("whatif",): [],
    ("findings",): [],
}


def _valid(command: tuple[str, ...], tmp: Path) -> list[str]:
    return [arg.replace("{tmp}", str(tmp)) for arg in VALID[command]]


def _value_options() -> list[tuple[tuple[str, ...], str]]:
    cases = []
    for command, parser in _subcommands().items():
        for action in parser._actions:
            if action.option_strings and action.nargs != 0 and action.dest != "help":
                cases.append((command, action.option_strings[-1]))
    return cases


def _check(argv: list[str], capsys: pytest.CaptureFixture[str],
           codes: tuple[int, ...] = (1, 2)) -> str:
    code = main(argv)  # an exception escaping here fails the test with its traceback
    captured = capsys.readouterr()
    assert code in codes, (argv, code, captured.err)
    assert "Traceback" not in captured.err + captured.out, argv
    assert "error" in captured.err.lower(), (argv, captured.err)
    return captured.err


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()


def test_every_subcommand_is_covered() -> None:
    assert set(_subcommands()) == set(VALID)


@pytest.mark.parametrize(("command", "option"), _value_options(),
                         ids=lambda value: " ".join(value) if isinstance(value, tuple) else value)
def test_an_empty_value_is_a_usage_error(command: tuple[str, ...], option: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``--warehouse ""``, ``--out ""``, ``--run ""``: exit 2 before any work is done."""
    warehouse = ["--warehouse", str(tmp_path / "wh")] if option != "--warehouse" else []
    _check([*command, *_valid(command, tmp_path), *warehouse, option, ""], capsys, codes=(2,))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["traces"]


@pytest.mark.parametrize("command", [c for c in VALID if VALID[c]],
                         ids=lambda value: " ".join(value))
def test_missing_arguments_are_a_usage_error(command: tuple[str, ...],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _check(list(command), capsys, codes=(2,))


@pytest.mark.parametrize("command", [("sql",), ("ingest",), ("compare",)],
                         ids=lambda value: " ".join(value))
def test_empty_positional_is_a_usage_error(command: tuple[str, ...], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _check([*command, "", "--warehouse", str(tmp_path / "wh")], capsys, codes=(2,))


#: Malformed invocations; ``{tmp}`` is the test folder, ``{file}`` a plain file in it.
MALFORMED = [
    ["sql", "selec 1 frm", "--warehouse", "{tmp}/wh"],
    ["sql", "select 1", "--warehouse", "{file}"],
    ["sql", "select * from nowhere", "--warehouse", "{tmp}/missing"],
    ["compare", "a", "b", "--warehouse", "{tmp}/missing"],
    ["compare", "a", "b", "--warehouse", "{file}"],
    ["compare", "a", "b", "--format", "xml"],
    ["ingest", "{tmp}/missing"],
    ["ingest", "{tmp}/traces", "--warehouse", "{file}"],
    ["ingest", "{tmp}/traces", "-j", "0"],
    ["ingest", "{tmp}/traces", "-j", "x"],
    ["ingest", "{tmp}/traces", "--engine", "nope"],
    ["report", "--warehouse", "{tmp}/missing"],
    ["report", "--warehouse", "{file}"],
    ["report", "--run", "nope", "--warehouse", "{tmp}/missing"],
    ["export", "table", "traces", "--out", "{tmp}/x.xlsx", "--warehouse", "{tmp}/missing"],
    ["export", "table", "nope", "--out", "{tmp}/x.csv", "--warehouse", "{tmp}/missing"],
    ["export", "table", "traces", "--out", "{file}/x.csv", "--warehouse", "{tmp}/missing"],
    ["export", "table", "traces", "--out", "{tmp}/x.csv", "--warehouse", "{file}"],
    ["export", "perfetto", "--run", "r", "--out", "{tmp}/x.pftrace",
     "--warehouse", "{tmp}/missing"],
    ["export", "perfetto", "--run", "r", "--out", "{tmp}/x", "--ranks", "3-1"],
    ["export", "perfetto", "--run", "r", "--out", "{tmp}/x", "--ranks", "a,b"],
    ["export", "perfetto", "--run", "r", "--out", "{tmp}/x", "--ranks", "0", "--replica", "1"],
    ["topology", "--world", "0", "--tp", "1", "--pp", "1"],
    ["topology", "--world", "-8", "--tp", "1", "--pp", "1"],
    ["topology", "--world", "8", "--tp", "3", "--pp", "1"],
    ["topology", "--world", "8", "--tp", "0", "--pp", "1"],
    ["topology", "--world", "8", "--tp", "2", "--pp", "2", "--order", "nope"],
    ["topology", "--world", "1", "--tp", "1", "--pp", "1", "--out", "{file}/topology.json"],
    ["simulate", "--tp", "0", "--pp", "1", "--dp", "1", "--microbatches", "1",
     "--iterations", "1", "--out", "{tmp}/sim"],
    ["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "0",
     "--iterations", "1", "--out", "{tmp}/sim"],
    ["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
     "--iterations", "-1", "--out", "{tmp}/sim"],
    ["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
     "--iterations", "1", "--straggler", "x", "--out", "{tmp}/sim"],
    ["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
     "--iterations", "1", "--out", "{file}"],
    ["simulate", "--tp", "1", "--pp", "1", "--dp", "1", "--microbatches", "1",
     "--iterations", "1", "--clock-skew-us", "nan", "--out", "{tmp}/sim"],
    ["demo", "--out", "{file}", "--warehouse", "{tmp}/wh"],
    ["demo", "--warehouse", "{file}"],
    ["build", "--warehouse", "{file}"],
    ["commtrace", "--tp", "0", "--pp", "1", "--dp", "1", "--out", "{tmp}/ct"],
    ["commtrace", "--tp", "1", "--pp", "1", "--dp", "1", "--order", "nope", "--out", "{tmp}/ct"],
    ["commtrace", "--tp", "1", "--pp", "1", "--dp", "1", "--ranks", "3-1", "--out", "{tmp}/ct"],
    ["commtrace", "--tp", "1", "--pp", "1", "--dp", "1", "--ranks", "5", "--out", "{tmp}/ct"],
    ["commtrace", "--tp", "1", "--pp", "1", "--dp", "1", "-j", "0", "--out", "{tmp}/ct"],
    ["commtrace", "--tp", "1", "--pp", "1", "--dp", "1", "--out", "{file}"],
    ["serve", "--warehouse", "{tmp}/missing"],
    ["serve", "--warehouse", "{file}"],
    ["serve", "--port", "70000", "--warehouse", "{tmp}/missing"],
    ["serve", "--port", "x"],
    ["export"],
    ["nope"],
    [],
]


@pytest.mark.parametrize("argv", MALFORMED, ids=lambda argv: " ".join(argv) or "(nothing)")
def test_malformed_arguments_end_in_an_error_line(argv: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    plain_file = tmp_path / "plain.txt"
    plain_file.write_text("not a folder\n")
    filled = [arg.replace("{tmp}", str(tmp_path)).replace("{file}", str(plain_file))
              for arg in argv]
    _check(filled, capsys)
    assert plain_file.read_text() == "not a folder\n"
