"""House style is checked, not hoped for: sqlfluff on the dbt models and on the SQL
dbt compiles from them (where the macros' SQL is), ruff on the Python."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

#: sqlfluff settings for compiled SQL (what is noise on generated SQL, and why).
COMPILED_CONFIG = REPO_ROOT / "tests" / "sqlfluff_compiled.cfg"
#: dbt's own `where:` wrapper of a data test, `(select ... where ...) dbt_subquery`
#: (dbt-core's get_where_subquery): dbt's SQL, not the project's, given its `as`.
_DBT_WHERE_WRAPPER = re.compile(r"\)\s+dbt_subquery\b")


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(REPO_ROOT / ".venv" / "bin")) or shutil.which(
        name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return path


def _sqlfluff_lint(paths: list[str], cwd: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("sqlfluff"), "lint", *options, *paths], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def compiled_sql(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the project's SQL as dbt compiles it on the dev (DuckDB) target.

    One file per project model, hook, singular test and test of a project
    generic test (macros/generic_tests), named ``<resource type>.<name>.sql``
    (``test.<generic test>.<name>.sql`` for a generic test's):
    there the macros' SQL appears, with the arguments the project passes and
    the DuckDB implementations of the dispatched macros (macros/portable.sql).
    Tests of dbt's built-in generic tests (not_null, unique, ...) are dbt's
    SQL and left out. Compiling needs no lake: with the cache not populated
    dbt finds no table, so every per-trace model compiles as a full build.
    The what-if models are on by default (dbt_project.yml, var ``whatif``),
    so their SQL is linted too.
    """
    from tracehouse.build.dbt import run_dbt

    warehouse = tmp_path_factory.mktemp("compiled")
    assert run_dbt(["compile", "--no-populate-cache"], warehouse) == 0, (
        "dbt compile failed; see its output")
    manifest = json.loads((warehouse / "dbt" / "target" / "manifest.json").read_text())
    project_tests = {macro["name"].removeprefix("test_")
                     for macro in manifest["macros"].values()
                     if macro["package_name"] == "tracehouse"
                     and macro["name"].startswith("test_")}
    folder = warehouse / "lint"
    folder.mkdir()
    for node in manifest["nodes"].values():
        if node["package_name"] != "tracehouse":
            continue
        kind = node["resource_type"]
        generic = (node.get("test_metadata") or {}).get("name")
        if kind == "test" and generic is not None and generic not in project_tests:
            continue
        if kind not in ("model", "test", "operation"):
            continue
        if node.get("language") == "python":  # a dbt Python model: ruff lints it
            continue
        sql = _DBT_WHERE_WRAPPER.sub(") as dbt_subquery", node.get("compiled_code") or "")
        assert sql.strip(), f"dbt compiled no SQL for {node['unique_id']}"
        label = f"{kind}.{generic}" if kind == "test" and generic is not None else kind
        (folder / f"{label}.{node['name']}.sql").write_text(sql)
    return folder


@pytest.mark.slow  # sqlfluff over every model (tens of seconds)
def test_models_pass_sqlfluff() -> None:
    result = _sqlfluff_lint(["models/"], REPO_ROOT)
    assert result.returncode == 0, result.stdout[-4000:]


@pytest.mark.slow  # sqlfluff over every model (tens of seconds)
def test_compiled_sql_covers_the_macros(compiled_sql: Path) -> None:
    """The compiled SQL holds every model and the project's generic tests."""
    names = {path.name for path in compiled_sql.iterdir()}
    models = {f"model.{path.stem}.sql" for path in (REPO_ROOT / "models").rglob("*.sql")}
    assert models and models <= names, sorted(models - names)
    for generic in (REPO_ROOT / "macros" / "generic_tests").glob("*.sql"):
        assert any(name.startswith(f"test.{generic.stem}.") for name in names), generic.stem


@pytest.mark.slow  # sqlfluff over every model (tens of seconds)
def test_compiled_sql_passes_sqlfluff(compiled_sql: Path) -> None:
    """The macros' SQL, as compiled into the models and tests, passes the
    non-layout rules (tests/sqlfluff_compiled.cfg). A finding names the
    compiled file and line; the SQL there comes from the model or a macro."""
    result = _sqlfluff_lint(["."], compiled_sql, "--config", str(COMPILED_CONFIG),
                            "--processes", "0", "--disable-progress-bar")
    assert result.returncode == 0, (
        f"compiled SQL under {compiled_sql}:\n" + result.stdout[-6000:] + result.stderr[-2000:])


def test_python_passes_ruff() -> None:
    result = subprocess.run([_tool("ruff"), "check", "."], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
