"""Python dependencies point down the layers, and no two packages import each other.

The shipped packages (``[tool.setuptools]`` in pyproject.toml) sit in
layers, lowest first; a module may import its own package and any package
of a lower layer, never one of its own layer or above:

1. ``tracehouse.core``: warehouse location, build lock and publishing, the
   topology and PP-timer file formats, megatron-core's rank groups.
2. ``tracehouse.ingest``, ``tracehouse.build``, ``tracehouse.simulate``,
   ``tracehouse.commtrace``, ``tracehouse.megatron_patch``: libraries that
   need only the core, and not each other.
3. ``tracehouse.query``: SQL over lake and marts (names the lake tables
   from ingest's schema).
4. ``tracehouse.reports``: charts, the HTML report and exports, over marts;
   ``tracehouse.nsys_views``: nsys-ai's views of an Nsight export (loads
   the file and builds the marts it reads, then queries them).
5. ``tracehouse.serve``: the interactive viewer (its headline is the
   report's, its connection ``tracehouse sql``'s).
6. ``tracehouse.cli`` and ``tracehouse`` itself (``tracehouse.notebook``):
   the entry points.

Why: the core must be importable alone (the Megatron patch runs inside
training jobs and must not pull in DuckDB, dbt or the CLI), a reader should
be able to draw the packages as a stack, and a change low in the stack
should never need a module from the top. Imports inside functions count:
a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO_ROOT

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"tracehouse.core"}),
    frozenset({"tracehouse.ingest", "tracehouse.build", "tracehouse.simulate",
               "tracehouse.commtrace", "tracehouse.megatron_patch"}),
    frozenset({"tracehouse.query"}),
    frozenset({"tracehouse.reports", "tracehouse.nsys_views"}),
    frozenset({"tracehouse.serve"}),
    frozenset({"tracehouse.cli", "tracehouse"}),
)
LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports left as written)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def shipped_modules() -> dict[str, Path]:
    """Every module the wheel installs, by dotted name, from pyproject.toml's package map."""
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = setuptools.get("package-dir", {})
    modules: dict[str, Path] = {}
    for package in setuptools["packages"]:
        # The folder of the longest mapped package above it (package-dir), then the rest.
        mapped = max((name for name in folders
                      if package == name or package.startswith(name + ".")), key=len, default="")
        rest = package[len(mapped):].lstrip(".").split(".") if package != mapped else []
        folder = REPO_ROOT.joinpath(folders.get(mapped, ""), *rest)
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def package_of(module: str) -> str:
    """The layer package a module belongs to: ``tracehouse.<sub>``, or ``tracehouse`` itself."""
    parts = module.split(".")
    if len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in LAYER_OF:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The shipped modules ``module`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module.split(".") if path.stem == "__init__" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
            target = ".".join(part for part in (base, node.module or "") if part)
            # `from tracehouse import notebook` imports the submodule, not the package.
            targets = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target
                       for alias in node.names]
        else:
            continue
        found.update(name for name in targets if name.split(".")[0] == "tracehouse")
    return found


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) → the module imports that make the edge."""
    modules = shipped_modules()
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in modules.items():
        for target in imported_modules(module, path, set(modules)):
            source_package, target_package = package_of(module), package_of(target)
            if source_package != target_package:
                edges[source_package, target_package].append(f"{module} -> {target}")
    return edges


def test_the_graph_is_computed_from_the_shipped_code() -> None:
    """The walk sees real edges (so the layering tests below cannot pass vacuously)."""
    edges = package_edges()
    assert "tracehouse.ingest.runner -> tracehouse.core.publish" in edges[
        "tracehouse.ingest", "tracehouse.core"]
    assert ("tracehouse.cli", "tracehouse.reports") in edges
    assert {"tracehouse.simulate.run", "tracehouse.reports.perfetto.export"} <= set(
        shipped_modules())


def test_every_shipped_package_has_a_layer() -> None:
    packages = {package_of(module) for module in shipped_modules()}
    assert packages - set(LAYER_OF) == set(), "add the new package to LAYERS (and the docstring)"


def test_no_import_points_up_or_across() -> None:
    offenders = {
        f"{source} (layer {LAYER_OF[source] + 1}) -> {target} (layer {LAYER_OF[target] + 1})":
            sorted(modules)
        for (source, target), modules in package_edges().items()
        if LAYER_OF[target] >= LAYER_OF[source]
    }
    assert offenders == {}


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in package_edges():
        graph[source].add(target)
    done: set[str] = set()

    def cycle_from(package: str, path: list[str]) -> list[str] | None:
        if package in path:
            return [*path[path.index(package):], package]
        if package in done:
            return None
        for target in sorted(graph[package]):
            found = cycle_from(target, [*path, package])
            if found:
                return found
        done.add(package)
        return None

    cycles = [cycle for package in sorted(graph) if (cycle := cycle_from(package, []))]
    assert cycles == []


def test_the_root_package_imports_nothing() -> None:
    """``import tracehouse.core`` runs ``tracehouse/__init__.py``: it must load nothing else."""
    assert {name for name in _imports(REPO_ROOT / "tracehouse" / "__init__.py")
            if name.startswith("tracehouse")} == set()


def test_core_never_imports_the_megatron_patch() -> None:
    offenders = {}
    for folder in ("tracehouse", "ingest", "reports"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            bad = {name for name in _imports(path)
                   if name.startswith(("tracehouse.megatron_patch", "megatron_patch"))}
            if bad:
                offenders[str(path.relative_to(REPO_ROOT))] = sorted(bad)
    assert offenders == {}


def test_the_patch_uses_the_cores_formats() -> None:
    """The patch writes the topology and PP-timer files with the core's one writer."""
    patch = REPO_ROOT / "megatron_patch"
    assert "tracehouse.core.topology_files" in _imports(patch / "topology_dump.py")
    assert "tracehouse.core.pp_timer_format" in _imports(patch / "pp_timer.py")
