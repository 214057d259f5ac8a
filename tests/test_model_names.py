"""Model names and folders follow the house style (STYLE.md, rules 1 and 5).

A reader finds a model by its name and its folder: staging views are
``stg_<source>__<entity>s`` in ``staging/<source>/``, intermediate tables
``int_<entity>s_<verb>ed`` (what was done to the rows) in
``intermediate/<concern>/``, marts ``fct_*`` and ``dim_*`` in
``marts/<concern>/``; and each folder has one YAML file for its models,
named for the folder, so that a model's description is found beside it and
no two folders share a YAML name (dbt Labs' guide: ``_<dir>__models.yml``,
``_int_<dir>__models.yml`` for intermediate folders; a staging folder adds
its ``_<source>__sources.yml``). Issue 35 found models without a verb
(``int_traces``), partners in different folders and three YAML files in one
folder; this test keeps them from coming back. It reads the files only (no
dbt run): dbt itself would accept any of these.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

from conftest import REPO_ROOT

MODELS = REPO_ROOT / "models"
#: Model files dbt reads: SQL and Python models.
MODEL_SUFFIXES = (".sql", ".py")
#: Past participles that do not end in -ed, allowed as an intermediate model's verb.
IRREGULAR_VERBS = frozenset({"built", "cut", "found", "kept", "run", "set", "split", "swept"})


def _model_files() -> list[Path]:
    return sorted(path for path in MODELS.rglob("*")
                  if path.suffix in MODEL_SUFFIXES and not path.name.startswith("_"))


def _layer(path: Path) -> str:
    return path.relative_to(MODELS).parts[0]


def _folders() -> list[Path]:
    return sorted({path.parent for path in _model_files()})


def _yaml_name(folder: Path) -> str:
    prefix = "int_" if _layer(folder) == "intermediate" else ""
    return f"_{prefix}{folder.name}__models.yml"


@cache
def _described_models(yaml_path: Path) -> frozenset[str]:
    """The models a YAML file describes (parsed once: pyyaml takes ~0.1 s a file)."""
    spec = yaml.safe_load(yaml_path.read_text()) or {}
    return frozenset(model["name"] for model in spec.get("models") or [])


def test_every_model_sits_in_a_layer_folder() -> None:
    misplaced = [str(path.relative_to(MODELS)) for path in _model_files()
                 if len(path.relative_to(MODELS).parts) != 3
                 or _layer(path) not in {"staging", "intermediate", "marts"}]
    assert not misplaced, f"models outside <layer>/<folder>/: {misplaced}"


def test_model_names_follow_their_layer() -> None:
    wrong: list[str] = []
    for path in _model_files():
        name, layer, folder = path.stem, _layer(path), path.parent.name
        if layer == "staging":
            ok = re.fullmatch(rf"stg_{folder}__[a-z0-9_]+s", name) is not None
        elif layer == "intermediate":
            match = re.fullmatch(r"int_[a-z0-9_]+_([a-z]+)", name)
            ok = match is not None and (match.group(1).endswith("ed")
                                        or match.group(1) in IRREGULAR_VERBS)
        else:
            ok = re.fullmatch(r"(fct|dim)_[a-z0-9_]+", name) is not None
        if not ok:
            wrong.append(f"{layer}/{folder}/{name}")
    assert not wrong, (
        "names off the house style (stg_<source>__<entity>s, int_<entity>s_<verb>ed, "
        f"fct_*/dim_*): {wrong}")


def test_one_models_yaml_per_folder_named_for_it() -> None:
    wrong: list[str] = []
    for folder in _folders():
        found = sorted(path.name for path in folder.glob("_*.yml"))
        expected = [_yaml_name(folder)]
        if _layer(folder) == "staging":
            expected = sorted([*expected, f"_{folder.name}__sources.yml"])
        if found != expected:
            wrong.append(f"{folder.relative_to(MODELS)}: {found}, expected {expected}")
    assert not wrong, wrong


def test_each_model_is_described_in_its_own_folder() -> None:
    elsewhere: list[str] = []
    for path in _model_files():
        yaml_path = path.parent / _yaml_name(path.parent)
        if not yaml_path.is_file() or path.stem not in _described_models(yaml_path):
            elsewhere.append(str(path.relative_to(MODELS)))
    assert not elsewhere, f"models not described in their folder's YAML: {elsewhere}"


def test_yaml_describes_no_model_that_is_not_in_its_folder() -> None:
    strays: list[str] = []
    for folder in _folders():
        here = {path.stem for path in folder.iterdir() if path.suffix in MODEL_SUFFIXES}
        yaml_path = folder / _yaml_name(folder)
        if yaml_path.is_file():
            strays += [f"{folder.relative_to(MODELS)}: {name}"
                       for name in sorted(_described_models(yaml_path) - here)]
    assert not strays, f"YAML entries of models in another folder (or none): {strays}"
