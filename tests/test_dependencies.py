"""Python dependencies point one way: the Megatron patch imports the core, never the reverse.

The patch runs inside training jobs; the core (ingest, models' Python,
reports, the command line, the simulator) must work without it and must
not grow a hidden dependency on code that only makes sense in a job.
"""

from __future__ import annotations

import ast

from conftest import REPO_ROOT

CORE_FOLDERS = ("tracehouse", "ingest", "reports")


def _imports(path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_never_imports_the_megatron_patch() -> None:
    offenders = {}
    for folder in CORE_FOLDERS:
        for path in (REPO_ROOT / folder).rglob("*.py"):
            bad = {name for name in _imports(path)
                   if name.startswith(("tracehouse.megatron_patch", "megatron_patch"))}
            if bad:
                offenders[str(path.relative_to(REPO_ROOT))] = sorted(bad)
    assert offenders == {}


def test_the_patch_uses_the_cores_formats() -> None:
    """The patch writes the topology and PP-timer files with the core's one writer."""
    patch = REPO_ROOT / "megatron_patch"
    assert "tracehouse.topology_files" in _imports(patch / "topology_dump.py")
    assert "tracehouse.pp_timer_format" in _imports(patch / "pp_timer.py")
