"""dbt's parse of the project is shared between warehouses (tracehouse/build/parse_cache.py).

* A new warehouse starts from the parse another warehouse saved: dbt's log
  says partial parsing was used, not that it started a full parse.
* A saved parse that no longer matches (here: another dbt profile) is only
  a full parse, never a wrong one.
* Builds with other ``--vars`` keep a parse of their own, so alternating
  between them (a plain build, then ``--vars '{whatif: false}'``) parses
  the project once per variant, not on every switch.
* dbt runs from the database's folder; the caller's folder, the variables it
  touched and relative path options come through unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from conftest import Lake, build_lake, copy_warehouse
from tracehouse.build import parse_cache
from tracehouse.build.dbt import EXIT_OK, project_dir, run_dbt
from tracehouse.build.dbt_arguments import absolute_path_options as _absolute_path_options
from tracehouse.core.publish import DATABASE_ENV_VAR

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


def _parse_lines(warehouse: Path) -> list[str]:
    log = (warehouse / "dbt" / "logs" / "dbt.log").read_text(errors="replace")
    return [line for line in log.splitlines()
            if "partial parsing" in line.lower() or "full parse" in line.lower()]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty parse cache of the test's own."""
    path = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.CACHE_ENV_VAR, str(path))
    # The parse lines these tests read are dbt's debug lines (tracehouse writes the
    # file log at info unless told).
    monkeypatch.setenv("DBT_LOG_LEVEL_FILE", "debug")
    return path


@pytest.fixture
def own_built(built_warehouse: Lake, tmp_path: Path) -> Path:
    """A private copy of the session's built synthetic warehouse: these tests run dbt in it."""
    return copy_warehouse(built_warehouse.warehouse, tmp_path / "built")


def test_a_new_warehouse_starts_from_the_parse_another_saved(
        tmp_path: Path, cache_dir: Path) -> None:
    first = build_lake(tmp_path / "first").warehouse
    second = build_lake(tmp_path / "second").warehouse

    assert run_dbt(["ls", "--select", "dim_ranks"], first) == EXIT_OK
    assert any("Starting full parse" in line for line in _parse_lines(first))
    saved = parse_cache.cache_file(project_dir())
    assert saved.is_file() and saved.is_relative_to(cache_dir)

    # The other warehouse names another lake (the one source file dbt
    # re-parses) and another database, yet reuses everything else.
    assert run_dbt(["ls", "--select", "dim_ranks"], second) == EXIT_OK
    lines = _parse_lines(second)
    assert any("Partial parsing enabled" in line for line in lines), lines
    assert not any("Starting full parse" in line or "Unable to do partial" in line
                   for line in lines), lines


def _last_parse_lines(warehouse: Path) -> list[str]:
    log = (warehouse / "dbt" / "logs" / "dbt.log").read_text(errors="replace")
    last = log[log.rfind("Running with dbt="):]
    return [line for line in last.splitlines()
            if "partial parsing" in line.lower() or "full parse" in line.lower()]


def test_each_vars_keeps_its_own_parse(tmp_path: Path, cache_dir: Path) -> None:
    first = build_lake(tmp_path / "first").warehouse
    second = build_lake(tmp_path / "second").warehouse
    lean = ["--vars", "{whatif: false}"]
    assert run_dbt(["ls", "--select", "dim_ranks"], first) == EXIT_OK
    assert run_dbt(["ls", "--select", "dim_ranks", *lean], first) == EXIT_OK
    assert any("Unable to do partial" in line or "full parse" in line
               for line in _last_parse_lines(first)), "other vars must parse again"

    # The other warehouse switches both ways and never parses from scratch;
    # nor does the first, switching back to its own earlier vars.
    for warehouse, args in ((second, lean), (second, []), (first, [])):
        assert run_dbt(["ls", "--select", "dim_ranks", *args], warehouse) == EXIT_OK
        lines = _last_parse_lines(warehouse)
        assert any("Partial parsing enabled" in line for line in lines), (args, lines)
        assert not any("Starting full parse" in line or "Unable to do partial" in line
                       for line in lines), (args, lines)
    assert {path.name for path in cache_dir.rglob("*.msgpack")} == {
        parse_cache.PARSE_FILE,
        parse_cache.cache_file(project_dir(), parse_cache.variant_of("{whatif: false}", None)).name,
    }


def test_a_build_and_a_reader_of_one_warehouse_share_the_parse(
        own_built: Path, cache_dir: Path) -> None:
    """A build (which writes a copy in .build/) and `dbt ls` (which reads the
    published file) present the same profile to dbt, so neither re-parses."""
    warehouse = own_built
    assert run_dbt(["ls", "--select", "fct_kernels"], warehouse) == EXIT_OK
    assert run_dbt(["build", "--select", "dim_ranks"], warehouse) == EXIT_OK
    last_run = _parse_lines(warehouse)[-1]
    assert "Partial parsing enabled" in last_run, last_run


def test_a_parse_saved_under_another_profile_is_parsed_again(
        tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_lake(tmp_path / "first").warehouse
    second = build_lake(tmp_path / "second").warehouse
    assert run_dbt(["ls", "--select", "dim_ranks"], first) == EXIT_OK

    # profiles.yml puts the memory limit into dbt's profile hash: a parse saved under
    # another limit is never reused as is. Each limit keeps a parse of its own
    # (`tracehouse nsys` builds at 1GB beside plain builds), so the first build
    # under this one parses from scratch, and the default's parse is still there.
    monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", "1GB")
    assert run_dbt(["ls", "--select", "dim_ranks"], second) == EXIT_OK
    lines = _parse_lines(second)
    assert any("Starting full parse" in line or "profile has changed" in line
               for line in lines), lines
    monkeypatch.delenv("TRACEHOUSE_MEMORY_LIMIT")
    assert run_dbt(["ls", "--select", "dim_ranks"], second) == EXIT_OK
    lines = _last_parse_lines(second)
    assert any("Partial parsing enabled" in line for line in lines), lines
    assert not any("Starting full parse" in line or "Unable to do partial" in line
                   for line in lines), lines


def test_dbt_runs_beside_the_database_and_puts_everything_back(
        own_built: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATABASE_ENV_VAR, raising=False)
    monkeypatch.delenv(parse_cache.TEMP_DIR_ENV_VAR, raising=False)
    # A failing run (unknown model) must restore them too.
    assert run_dbt(["build", "--select", "no_such_model_anywhere"], own_built) == EXIT_OK
    assert run_dbt(["run", "--select", "dim_ranks", "--vars", "{broken"], own_built) != EXIT_OK
    assert Path.cwd() == tmp_path
    assert DATABASE_ENV_VAR not in os.environ
    assert parse_cache.TEMP_DIR_ENV_VAR not in os.environ


def test_relative_path_options_are_made_absolute(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dbt.cli.main import cli

    monkeypatch.chdir(tmp_path)
    command: click.Command = cli.commands["build"]
    argv = ["build", "--state", "prod", "--target-path=out/t", "--select", "state:modified+"]
    assert _absolute_path_options(argv, command) == [
        "build", "--state", str(tmp_path / "prod"), f"--target-path={tmp_path / 'out/t'}",
        "--select", "state:modified+",
    ]


def test_an_unwritable_cache_only_costs_the_parse(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(parse_cache.CACHE_ENV_VAR, str(blocker / "cache"))
    warehouse = build_lake(tmp_path / "warehouse").warehouse
    assert run_dbt(["ls", "--select", "dim_ranks"], warehouse) == EXIT_OK
    assert not parse_cache.cache_file(project_dir()).exists()
