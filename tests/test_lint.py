"""House style is checked, not hoped for: sqlfluff on the dbt models, ruff on the Python."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(REPO_ROOT / ".venv" / "bin")) or shutil.which(
        name, path=str(__import__("pathlib").Path(sys.executable).parent))
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return path


def test_models_pass_sqlfluff() -> None:
    result = subprocess.run([_tool("sqlfluff"), "lint", "models/"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]


def test_python_passes_ruff() -> None:
    result = subprocess.run([_tool("ruff"), "check", "."], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
