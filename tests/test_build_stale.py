"""What tells a build which per-trace tables a project change made stale (no dbt run).

tracehouse.build.state.settings_fingerprint: what no node's state shows (vars, the
profile, the materializations) refreshes every table; an edit of a model or of a
YAML description changes the project, not the settings, so dbt's
``state:modified+`` decides (tracehouse.build.stale; the slow test
test_incremental.py::test_changed_model_rebuilds_its_per_trace_descendants_and_a_description_nothing
runs it on a real warehouse).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracehouse.build.stale import (
    keep_manifest,
    kept_manifest,
    parse_options,
    relation_names,
    stale_relations,
)
from tracehouse.build.state import fingerprint, settings_fingerprint


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "models").mkdir(parents=True)
    (root / "macros" / "materializations").mkdir(parents=True)
    (root / "models" / "a.sql").write_text("select 1")
    (root / "models" / "_models.yml").write_text("models:\n  - name: a\n    description: one\n")
    (root / "macros" / "materializations" / "m.sql").write_text("{# m #}")
    (root / "profiles.yml").write_text("p: {}\n")
    (root / "dbt_project.yml").write_text("name: p\nvars:\n  threshold: 1\n")
    return root


def test_model_and_description_edits_change_the_project_not_the_settings(
    project: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    before = fingerprint(project, lake, ["build"])
    (project / "models" / "a.sql").write_text("select 2")
    (project / "models" / "_models.yml").write_text("models:\n  - name: a\n    description: 2\n")
    # A comment or a models: config in dbt_project.yml is the nodes' business too.
    (project / "dbt_project.yml").write_text("name: p\n# note\nvars:\n  threshold: 1\n")
    after = fingerprint(project, lake, ["build"])
    assert after.project != before.project
    assert after.settings == before.settings


@pytest.mark.parametrize("edit", ["vars", "cli_vars", "profile", "materialization"])
def test_vars_profile_and_materializations_change_the_settings(
    edit: str, project: Path
) -> None:
    before = settings_fingerprint(project, ["build"])
    args = ["build"]
    if edit == "vars":
        (project / "dbt_project.yml").write_text("name: p\nvars:\n  threshold: 2\n")
    elif edit == "cli_vars":
        args = ["build", "--vars", "{threshold: 2}"]
    elif edit == "profile":
        (project / "profiles.yml").write_text("p: {x: 1}\n")
    else:
        (project / "macros" / "materializations" / "m.sql").write_text("{# changed #}")
    assert settings_fingerprint(project, args) != before


def test_ls_parses_as_the_build_does() -> None:
    assert parse_options(["build", "--vars", "{a: 1}", "-s", "x", "--target=dev",
                          "-t", "spark", "--full-refresh"]) == [
        "--vars", "{a: 1}", "--target=dev", "-t", "spark"]
    assert parse_options(["build"]) == []


def test_without_a_kept_manifest_nothing_can_be_told_and_dbt_is_not_asked(
    tmp_path: Path
) -> None:
    def refuse(argv: list[str]) -> None:
        raise AssertionError(f"dbt was run: {argv}")

    assert stale_relations(tmp_path / "dbt", refuse) is None  # type: ignore[arg-type]


def test_the_build_manifest_is_kept_for_the_next_build(tmp_path: Path) -> None:
    artifacts = tmp_path / "dbt"
    keep_manifest(artifacts)  # nothing written yet: nothing kept
    assert not kept_manifest(artifacts).exists()
    (artifacts / "target").mkdir(parents=True)
    (artifacts / "target" / "manifest.json").write_text('{"nodes": {}}')
    keep_manifest(artifacts)
    assert kept_manifest(artifacts).read_text() == '{"nodes": {}}'
    assert relation_names(['"tracehouse"."intermediate"."int_a"']) == ["int_a"]
