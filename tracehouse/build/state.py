"""What a build was made from, so ``tracehouse build`` knows when it can skip or must refresh.

Why: the per-trace models (materialization ``per_trace``) add the rows of
new traces to the rows they hold, which is only right while the code that
computed those rows is the code of the project now. dbt itself does not
notice a changed model, macro, seed or var: it would append new traces'
rows computed one way to old rows computed another. So after each
successful build the fingerprints of the project (every file dbt reads,
plus the ``--vars`` given), of its settings (the project's ``vars:``, the
``--vars`` given, the profile and the materializations: what no node's
state in dbt's manifest shows) and of the lake (every Parquet file's path,
size and mtime) are kept in ``<warehouse>/dbt/build_state.json``:

* project changed since the last build → the per-trace tables it makes
  stale are dropped and built whole (:mod:`tracehouse.build.stale`: dbt's
  ``state:modified+`` against the manifest of the last build), the others
  stay; settings changed too (or no manifest kept) → the build runs with
  ``--full-refresh`` (and says so);
* project and lake both unchanged, and the same arguments → nothing can
  differ, so the build is skipped ("up to date") instead of spending dbt's
  start-up, every model and every test on the same answer;
* project, arguments and warehouse location unchanged but some lake tables
  changed → only what reads those tables needs building
  (:func:`changed_lake_tables`; the caller selects ``source:lake.<table>+``).
  This is the idea of dbt's ``source_status:fresher+``, with the lake's file
  stats in place of a freshness query over every Parquet file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Project files and folders whose content decides what a build computes.
PROJECT_INPUTS = ("models", "macros", "seeds", "tests/dbt", "dbt_project.yml", "profiles.yml")
#: Project files whose change no node's state in dbt's manifest shows, so that
#: ``state:modified`` cannot tell which tables they make stale: the profile and
#: the materializations (with the project's ``vars:``, read from dbt_project.yml).
SETTINGS_INPUTS = ("profiles.yml", "macros/materializations")
STATE_FILE = "build_state.json"

#: dbt options that change only what dbt prints or logs, never what it builds
#: (``tracehouse demo`` builds with ``--quiet``): left out when builds are
#: compared, so ``build --quiet`` is the plain build it looks like.
OUTPUT_FLAGS = frozenset({
    "--quiet", "-q", "--no-quiet", "--use-colors", "--no-use-colors", "--use-colors-file",
    "--no-use-colors-file", "--print", "--no-print", "--debug", "-d", "--no-debug",
    "--log-cache-events", "--no-log-cache-events", "--send-anonymous-usage-stats",
    "--no-send-anonymous-usage-stats", "--version-check", "--no-version-check",
})
#: The same, for options that take a value (``--log-level debug``).
OUTPUT_OPTIONS = frozenset({
    "--log-level", "--log-level-file", "--log-format", "--log-format-file", "--printer-width",
    "--log-file-max-bytes", "--log-path",
})


@dataclass(frozen=True)
class BuildFingerprint:
    """Fingerprints of what one build reads: the project code and the lake."""

    project: str
    lake: str
    args: str
    #: What every model reads beside its own code: vars, profile, materializations.
    settings: str = ""
    #: The warehouse folder the views were created for (they hold its path).
    location: str = ""
    #: (lake table, fingerprint of its files), sorted by table.
    lake_tables: tuple[tuple[str, str], ...] = ()
    #: The dbt arguments ``args`` fingerprints, as words, for messages only.
    command: str = field(default="", compare=False)

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "lake": self.lake,
            "args": self.args,
            "settings": self.settings,
            "command": self.command,
            "location": self.location,
            "lake_tables": dict(self.lake_tables),
        }


def _hash_files(paths: Iterable[Path], root: Path, *, content: bool) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(paths):
        stat = path.stat()
        digest.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape"))
        if content:
            digest.update(path.read_bytes())
        else:
            digest.update(f":{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def _files_under(root: Path, names: Sequence[str]) -> list[Path]:
    found = []
    for name in names:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return found


def _vars_arguments(dbt_args: Sequence[str]) -> list[str]:
    """The ``--vars`` values among dbt's arguments: they change what models compute."""
    found = []
    for index, arg in enumerate(dbt_args):
        if arg == "--vars" and index + 1 < len(dbt_args):
            found.append(dbt_args[index + 1])
        elif arg.startswith("--vars="):
            found.append(arg.split("=", 1)[1])
    return found


def settings_fingerprint(project_dir: Path, dbt_args: Sequence[str]) -> str:
    """The fingerprint of what every model reads beside its own code
    (:data:`SETTINGS_INPUTS`, the ``vars:`` of dbt_project.yml, the ``--vars`` given)."""
    import yaml

    files = _hash_files(_files_under(project_dir, SETTINGS_INPUTS), project_dir, content=True)
    try:
        project_vars = yaml.safe_load((project_dir / "dbt_project.yml").read_text()).get("vars")
    except (OSError, AttributeError, yaml.YAMLError):
        project_vars = None
    return hashlib.blake2b(
        json.dumps([files, project_vars, _vars_arguments(dbt_args)], sort_keys=True,
                   default=str).encode(),
        digest_size=16,
    ).hexdigest()


def _lake_files_by_table(lake_dir: Path) -> dict[str, list[Path]]:
    """Every file of the lake, grouped by its table (the lake's top-level folders)."""
    tables: dict[str, list[Path]] = {}
    if not lake_dir.is_dir():
        return tables
    for dirpath, _, filenames in os.walk(lake_dir):
        relative = Path(dirpath).relative_to(lake_dir)
        table = relative.parts[0] if relative.parts else ""
        tables.setdefault(table, []).extend(Path(dirpath) / name for name in filenames)
    return tables


def fingerprint(
    project_dir: Path, lake_dir: Path, dbt_args: Sequence[str], location: Path | None = None
) -> BuildFingerprint:
    """Fingerprint the project's files (by content) with the ``--vars`` given, the lake
    (by stat, per table and whole), the arguments and the warehouse's location."""
    project = _hash_files(_files_under(project_dir, PROJECT_INPUTS), project_dir, content=True)
    project = hashlib.blake2b(
        (project + json.dumps(_vars_arguments(dbt_args))).encode(), digest_size=16
    ).hexdigest()
    by_table = _lake_files_by_table(lake_dir)
    lake_tables = tuple(
        (table, _hash_files(files, lake_dir, content=False))
        for table, files in sorted(by_table.items())
    )
    lake = hashlib.blake2b(json.dumps(lake_tables).encode(), digest_size=16).hexdigest()
    args = args_fingerprint(dbt_args)
    return BuildFingerprint(
        project=project,
        lake=lake,
        args=args,
        settings=settings_fingerprint(project_dir, dbt_args),
        location=str(location.resolve()) if location is not None else "",
        lake_tables=lake_tables,
        command=" ".join(build_arguments(dbt_args)),
    )


def build_arguments(dbt_args: Sequence[str]) -> list[str]:
    """``dbt_args`` less the options that change only dbt's output (:data:`OUTPUT_FLAGS`,
    :data:`OUTPUT_OPTIONS`): what decides what a build builds."""
    kept: list[str] = []
    skip = False
    for arg in dbt_args:
        if skip:
            skip = False
        elif arg in OUTPUT_FLAGS:
            continue
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif not (arg.startswith("--") and arg.split("=", 1)[0] in OUTPUT_OPTIONS):
            kept.append(arg)
    return kept


def args_fingerprint(dbt_args: Sequence[str]) -> str:
    """The fingerprint of a build's dbt arguments (``BuildFingerprint.args``), less
    those that change only its output (:func:`build_arguments`)."""
    return hashlib.blake2b(json.dumps(build_arguments(dbt_args)).encode(),
                           digest_size=16).hexdigest()


def changed_lake_tables(last: BuildFingerprint | None, now: BuildFingerprint) -> list[str] | None:
    """The lake tables whose files changed since the last build, or None when a
    build must not be narrowed to them.

    Narrowing is right only when the last successful build ran the same
    command (so it built everything this one would) with the same project
    code, in the same folder, and recorded its tables: then a model that
    reads none of the changed tables would compute exactly what it holds.
    A table that appeared or disappeared counts as changed.
    """
    if (
        last is None
        or not last.lake_tables
        or not last.location
        or (last.project, last.args, last.location) != (now.project, now.args, now.location)
    ):
        return None
    before, after = dict(last.lake_tables), dict(now.lake_tables)
    return sorted(
        table for table in before.keys() | after.keys() if before.get(table) != after.get(table)
    )


def why_not_narrowed(last: BuildFingerprint | None, now: BuildFingerprint) -> str:
    """Why :func:`changed_lake_tables` would not narrow a build from ``last`` to ``now``
    (in words, for the line a build prints before building every model)."""
    if last is None:
        return "no record of an earlier build of this warehouse"
    if last.project != now.project:
        return "the dbt project (or its --vars) changed since the last build"
    if last.args != now.args:
        ran = f"`{last.command}`" if last.command else "other dbt arguments"
        return f"the last build ran {ran}, not `{now.command}`"
    if last.location != now.location:
        return (f"the warehouse was built in {last.location or 'another folder'}, "
                "and its views name that folder")
    return "the last build recorded no lake tables"


def read_state(artifacts: Path) -> BuildFingerprint | None:
    """The fingerprint of the last successful build, or None."""
    try:
        data = json.loads((artifacts / STATE_FILE).read_text())
        return BuildFingerprint(
            project=data["project"],
            lake=data["lake"],
            args=data["args"],
            settings=str(data.get("settings", "")),
            location=str(data.get("location", "")),
            lake_tables=tuple(sorted((str(k), str(v))
                                     for k, v in dict(data.get("lake_tables", {})).items())),
            command=str(data.get("command", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(artifacts: Path, state: BuildFingerprint) -> None:
    """Record a successful build's fingerprint (atomically)."""
    artifacts.mkdir(parents=True, exist_ok=True)
    tmp = artifacts / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state.to_json(), indent=1) + "\n")
    os.replace(tmp, artifacts / STATE_FILE)
