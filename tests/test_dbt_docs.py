"""``dbt docs generate`` works, and every mart and every mart column is described.

The marts are what people and reports query (ARCHITECTURE.md), so each one
and each of its columns must carry a description in the models' YAML. The
test builds a small simulated run into a temporary warehouse with the real
dbt project, generates the docs, and reads dbt's own artifacts: the catalog
(the columns the built tables really have) against the manifest (the
descriptions written in YAML). A column added to a mart's SQL without a
description fails the test, which names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracehouse.build.dbt import DBT_ARTIFACTS_DIR, EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths
from tracehouse.simulate import SimConfig, simulate_run

pytestmark = pytest.mark.slow

#: Marts are the models under this folder of the dbt project.
MARTS_FOLDER = "models/marts/"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built warehouse with generated docs; returns its dbt target folder."""
    root = tmp_path_factory.mktemp("docs")
    config = SimConfig(
        layers=4, hidden=256, heads=8, seq_length=256, vocab=1024,
        tp=2, pp=2, dp=1, microbatches=2, iterations=1,
    )  # fmt: skip
    run = simulate_run(config, root / "sim", jobs=1)
    warehouse = root / "warehouse"
    result = ingest_paths([run.out_dir], warehouse=warehouse, run="docs", progress=False)
    assert not result.failed, result.failed
    # Models and seeds only: the data tests are other tests' business.
    build = ["build", "--resource-type", "seed", "--resource-type", "model"]
    assert run_dbt(build, warehouse) == EXIT_OK
    assert run_dbt(["docs", "generate"], warehouse) == EXIT_OK
    return warehouse / DBT_ARTIFACTS_DIR / "target"


def _marts(manifest: dict) -> dict[str, dict]:
    return {
        uid: node
        for uid, node in manifest["nodes"].items()
        if node["resource_type"] == "model" and node["original_file_path"].startswith(MARTS_FOLDER)
    }


def test_docs_generate_writes_catalog_of_every_mart(artifacts: Path) -> None:
    assert (artifacts / "index.html").is_file()
    manifest = json.loads((artifacts / "manifest.json").read_text())
    catalog = json.loads((artifacts / "catalog.json").read_text())
    marts = _marts(manifest)
    assert marts, "no models under models/marts/"
    assert not catalog.get("errors"), catalog.get("errors")
    missing = sorted(node["name"] for uid, node in marts.items() if uid not in catalog["nodes"])
    assert not missing, f"marts not in the catalog (not built?): {missing}"


def test_every_mart_and_column_is_described(artifacts: Path) -> None:
    manifest = json.loads((artifacts / "manifest.json").read_text())
    catalog = json.loads((artifacts / "catalog.json").read_text())
    undescribed: list[str] = []
    for uid, node in sorted(_marts(manifest).items()):
        if not node["description"].strip():
            undescribed.append(f"{node['name']} (the model itself)")
        described = {
            name.lower() for name, column in node["columns"].items()
            if column.get("description", "").strip()
        }  # fmt: skip
        built = catalog["nodes"].get(uid, {}).get("columns", {})
        for column in built.values():
            if column["name"].lower() not in described:
                undescribed.append(f"{node['name']}.{column['name']}")
    assert not undescribed, (
        f"{len(undescribed)} mart column(s) without a description in the models' YAML: "
        + ", ".join(undescribed)
    )
