"""Which per-trace tables a changed project makes stale: dbt's own ``state:modified+``.

Why: a per-trace table (materialization ``per_trace``) keeps the rows it
computed for old traces and adds new traces' rows, so after a change of
the code that computed them its old rows must go. Refreshing every such
table on any edit (a YAML description included) rebuilt the whole chain;
dbt already knows which nodes an edit touched: ``state:modified`` compares
each node's code, config, upstream macros and seed contents with the
manifest of an earlier run, and ``+`` adds every node downstream. So the
manifest of the last successful build of a warehouse is kept beside its
artifacts (``<warehouse>/dbt/state/manifest.json``), and a build of a
changed project first asks ``dbt ls`` for ``state:modified+`` against it:
the per-trace tables and seeds listed are dropped from the build's copy of
the database, so that the build makes them whole again (a seed table is
reloaded from its CSV by the on-run-start hook, macros/seeds.sql), and
every other per-trace table keeps its rows.

What no node's state shows (vars, the profile, the materializations:
:func:`tracehouse.build.state.settings_fingerprint`) still refreshes every
table; the caller decides that.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dbt.cli.main import dbtRunnerResult

#: Folder (under the warehouse's dbt artifacts) holding the last successful build's manifest.
STATE_DIR = "state"
MANIFEST = "manifest.json"
#: dbt options that decide what a project parses to: passed on to ``dbt ls``.
_PARSE_OPTIONS = ("--vars", "--target", "-t")


def kept_manifest(artifacts: Path) -> Path:
    """Where the manifest of the last successful build of a warehouse is kept."""
    return artifacts / STATE_DIR / MANIFEST


def keep_manifest(artifacts: Path) -> None:
    """Keep the manifest the build just wrote (``target/manifest.json``) as the state
    the next build compares with; atomically, and only if there is one."""
    written = artifacts / "target" / MANIFEST
    if not written.is_file():
        return
    kept = kept_manifest(artifacts)
    kept.parent.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_name(f".{MANIFEST}.tmp")
    shutil.copyfile(written, tmp)
    os.replace(tmp, kept)


def parse_options(argv: Sequence[str]) -> list[str]:
    """The options of a dbt command line that change what the project parses to
    (``--vars``, ``--target``), so ``dbt ls`` parses as the build will (and the
    build reuses that parse)."""
    kept: list[str] = []
    for index, arg in enumerate(argv):
        if arg in _PARSE_OPTIONS and index + 1 < len(argv):
            kept += [arg, argv[index + 1]]
        elif "=" in arg and arg.split("=", 1)[0] in _PARSE_OPTIONS:
            kept.append(arg)
    return kept


def stale_relations(
    artifacts: Path,
    invoke: Callable[[list[str]], dbtRunnerResult],
    options: Sequence[str] = (),
) -> list[str] | None:
    """The relations (``"db"."schema"."name"``) of the per-trace models and seeds that
    are ``state:modified+`` against the kept manifest, or None when that cannot be
    told (no kept manifest, or ``dbt ls`` failed): then every table must be refreshed.

    ``invoke`` runs a dbt command line (with the project, profile and target
    paths the build uses); ``options`` are the build's :func:`parse_options`.
    """
    if not kept_manifest(artifacts).is_file():
        return None
    result = invoke([
        "ls", "--select", "state:modified+", "--state", str(kept_manifest(artifacts).parent),
        "--resource-type", "model", "--resource-type", "seed",
        "--output", "json", "--output-keys", "resource_type relation_name config",
        "--quiet", "--log-level", "none", *options,
    ])  # fmt: skip
    if not result.success or not isinstance(result.result, list):
        return None
    stale = []
    for line in result.result:
        node = json.loads(line)
        per_trace = node.get("config", {}).get("materialized") == "per_trace"
        if (per_trace or node.get("resource_type") == "seed") and node.get("relation_name"):
            stale.append(node["relation_name"])
    return sorted(stale)


def drop_relations(database: Path, relations: Sequence[str]) -> None:
    """Drop ``relations`` (tables, as :func:`stale_relations` names them) from ``database``,
    the build's copy, so that the build makes them whole again."""
    if not relations or not database.exists():
        return
    import duckdb

    con = duckdb.connect(str(database))
    try:
        for relation in relations:
            con.execute(f"drop table if exists {relation}")
    finally:
        con.close()


def relation_names(relations: Sequence[str]) -> list[str]:
    """The table names of ``relations`` (their last part), for the line a build prints."""
    return [relation.rsplit(".", 1)[-1].strip('"') for relation in relations]
