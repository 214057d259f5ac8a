"""One source for the lake's schema: ingest/schema.py, which the dbt sources YAML documents.

The sources YAML (models/staging/lake/_lake__sources.yml) names every raw
table and column the staging views read; ingest writes exactly the columns
of ``LAKE_TABLES``. A column added on one side and not the other would be a
silent NULL (or a missing description) downstream, so the two must agree,
table by table and column by column, in order.
"""

from __future__ import annotations

import yaml

from conftest import REPO_ROOT
from tracehouse.ingest.schema import LAKE_TABLES

SOURCES = REPO_ROOT / "models" / "staging" / "lake" / "_lake__sources.yml"


def _documented() -> dict[str, list[str]]:
    spec = yaml.safe_load(SOURCES.read_text())
    [lake] = [source for source in spec["sources"] if source["name"] == "lake"]
    return {
        table["name"]: [column["name"] for column in table.get("columns", [])]
        for table in lake["tables"]
    }


def test_sources_yaml_documents_every_lake_table() -> None:
    assert sorted(_documented()) == sorted(LAKE_TABLES)


def test_sources_yaml_documents_every_lake_column_in_order() -> None:
    documented = _documented()
    for table, schema in LAKE_TABLES.items():
        assert documented[table] == list(schema.names), table
