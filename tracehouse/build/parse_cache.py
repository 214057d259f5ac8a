"""dbt's parsed project, shared by every warehouse built from one checkout.

Why: before it runs anything, dbt parses the whole project (70 models,
300 data tests, 600 macros): 3.4 s of a 25 s build of 256 ranks on 2 cores.
It keeps the result in its target folder (``partial_parse.msgpack``) and
next time re-parses only the files that changed. tracehouse gives every
warehouse its own target folder, so the first build of each new warehouse,
and every test's warehouse, parsed from scratch.

So the parse is kept in a per-user cache, keyed by the project's folder,
the dbt version and the command's ``--vars`` and ``--target`` (the
variant), copied into a warehouse's target folder before dbt starts and
copied back after. Why the variant: dbt throws a saved parse away when the
vars or the target differ, and a cache of one parse per checkout then
swings between them: each `tracehouse build --vars '{whatif: false}'` after
a plain build (or the other way round) parsed the whole project again,
13-15 s of a 70 s build of 256 ranks at load 6 (benchmarks/README.md,
"Where a full build's time goes now"). dbt checks a saved parse against every
project file's checksum, the ``--vars``, the profile's connection settings
and its own version, and parses from scratch when anything differs: a stale
or foreign copy costs one parse, never a wrong manifest.

The profile's connection settings must then not name the warehouse, or
every warehouse would differ: :func:`beside_database` runs dbt from the
database's folder with the database and DuckDB's temporary folder given
relative to it. The lake source still names the absolute lake folder (the
views dbt creates must work from anywhere); dbt re-parses that one file
(about 0.2 s) when the warehouse differs.

``$TRACEHOUSE_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/tracehouse``, else ``~/.cache/tracehouse``); a cache that
cannot be read or written is skipped without a word, since it only saves
time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Environment variable naming the cache folder.
CACHE_ENV_VAR = "TRACEHOUSE_CACHE_DIR"
#: dbt's saved parse, inside its target folder.
PARSE_FILE = "partial_parse.msgpack"
#: Environment variable profiles.yml reads DuckDB's memory limit from.
MEMORY_LIMIT_ENV_VAR = "TRACEHOUSE_MEMORY_LIMIT"
#: Environment variable profiles.yml reads DuckDB's temporary folder from.
TEMP_DIR_ENV_VAR = "TRACEHOUSE_TEMP_DIR"
#: DuckDB's temporary folder inside the warehouse (profiles.yml's default).
TEMP_DIR = "tmp"


def cache_file(project: Path, variant: str = "") -> Path:
    """Where the saved parse of ``project`` (for the installed dbt) is kept;
    ``variant``: what else dbt checks a saved parse against (:func:`variant_of`)."""
    from dbt.version import __version__ as dbt_version

    base = os.environ.get(CACHE_ENV_VAR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tracehouse")
    key = hashlib.sha256(f"{Path(project).resolve()}\0{dbt_version}".encode()).hexdigest()[:16]
    name = PARSE_FILE if not variant else (
        f"{hashlib.sha256(variant.encode()).hexdigest()[:16]}.{PARSE_FILE}")
    return Path(base) / "dbt-parse" / key / name


def variant_of(vars_value: str | None, target: str | None,
               memory_limit: str | None = None) -> str:
    """The part of a command that dbt checks a saved parse against besides the
    files: its ``--vars`` (as given: another spelling only costs a parse),
    ``--target`` and ``$TRACEHOUSE_MEMORY_LIMIT``, which profiles.yml renders into
    the connection settings dbt hashes (``tracehouse nsys`` builds under its own
    limit: alternating with a plain build parsed the whole project each time,
    ~14 CPU s). Empty for none, which keeps the plain build's file name."""
    if not vars_value and not target and not memory_limit:
        return ""
    variant = f"vars={vars_value or ''}\0target={target or ''}"
    return variant + (f"\0memory_limit={memory_limit}" if memory_limit else "")


def restore(target: Path, project: Path, variant: str = "") -> None:
    """Give a target folder the last saved parse of ``project`` for ``variant``.

    It replaces the folder's own: that one is the parse of the folder's last
    command, which may have had other vars; the cache's was saved after it
    (:func:`save` runs after every command) when it was of this variant."""
    saved = cache_file(project, variant)
    if not saved.is_file():
        return
    try:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(saved, Path(target) / PARSE_FILE)
    except OSError:
        pass


def save(target: Path, project: Path, variant: str = "") -> None:
    """Keep the target folder's parse for the next warehouse (atomically replaced)."""
    parsed = Path(target) / PARSE_FILE
    saved = cache_file(project, variant)
    try:
        if not parsed.is_file():
            return
        if saved.is_file() and saved.stat().st_mtime >= parsed.stat().st_mtime:
            return
        saved.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=saved.parent, suffix=".part")
        os.close(handle)
        try:
            shutil.copyfile(parsed, temporary)
            os.replace(temporary, saved)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError:
        pass


@contextmanager
def beside_database(database_variable: str, database: Path) -> Iterator[None]:
    """Run the block in the database's folder, the profile's paths relative to it.

    The database is given to profiles.yml as ``$<database_variable>`` by its
    file name alone, so the published database (which ``tracehouse sql``,
    ``dbt ls`` or ``docs`` read) and a build's copy in ``.build/`` look the
    same to dbt; DuckDB's temporary folder is ``tmp`` beside it unless
    ``$TRACEHOUSE_TEMP_DIR`` names one (a relative one stays relative to
    where the command was started). The working folder and both variables
    are restored afterwards.
    """
    database = Path(database).resolve()
    started_in = os.getcwd()
    temp_dir = os.environ.get(TEMP_DIR_ENV_VAR)
    temp_dir = os.path.join(started_in, temp_dir) if temp_dir else TEMP_DIR
    previous = {name: os.environ.get(name) for name in (database_variable, TEMP_DIR_ENV_VAR)}
    database.parent.mkdir(parents=True, exist_ok=True)
    os.environ[database_variable] = database.name
    os.environ[TEMP_DIR_ENV_VAR] = temp_dir
    os.chdir(database.parent)
    try:
        yield
    finally:
        os.chdir(started_in)
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
