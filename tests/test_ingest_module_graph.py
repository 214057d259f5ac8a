"""ingest/'s modules import each other without a cycle, and each imports on its own.

Why: ``kineto`` and ``kineto_fast``, ``runner`` and ``perfetto_engine`` used
to import each other, the cycles dodged by imports inside functions; a
reader could not tell which module came first, and a module could not be
imported alone without the order working out (issue 30). The graph here
counts every import, at the top or inside a function (a lazy import is
still a dependency, as in tests/test_dependencies.py); compiled extensions
(``_kineto_scan``) are leaves and not in it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

INGEST = REPO_ROOT / "ingest"
PACKAGE = "tracehouse.ingest"


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Every Python module under ``root`` by dotted name (``package`` for ``root`` itself)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([package, *parts])] = path
    return modules


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (relative imports resolved).

    ``from . import x`` and ``from .p import x`` import the module ``x`` where
    it is one, else the module they name; the parent packages that Python
    initialises on the way are not edges (a package's ``__init__`` importing
    its own modules is not a cycle).
    """
    modules = modules_of(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
                named = ".".join(part for part in (base, node.module or "") if part)
                names = [f"{named}.{alias.name}" if f"{named}.{alias.name}" in modules
                         else named for alias in node.names]
            else:
                continue
            targets.update(name for name in names if name in modules and name != module)
        graph[module] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or None: a depth-first search."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph.get(module, ())):
            if target in on_path:
                return path[path.index(target):] + [target]
            if target not in done and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_ingest_imports_without_a_cycle() -> None:
    graph = import_graph(INGEST, PACKAGE)
    # The walk sees real edges (so the check below cannot pass on an empty graph).
    assert "tracehouse.ingest.kineto.native" in graph["tracehouse.ingest.runner"]
    assert "tracehouse.ingest.kineto.read" in graph["tracehouse.ingest.kineto.perfetto"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The check itself: a cycle that an import inside a function dodges is still one."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b  # a package's own module\n")
    (pkg / "a.py").write_text("from .sub.b import f\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert find_cycle(import_graph(pkg, "pkg")) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    # Without the lazy import: no cycle, though pkg.sub imports b (Python initialises a
    # module's parent package first; that is not an edge of the module's).
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None


def test_every_ingest_module_imports_in_a_fresh_interpreter() -> None:
    """Each module imports (no cycle that only an import order hides), all in one child."""
    names = sorted(modules_of(INGEST, PACKAGE))
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
