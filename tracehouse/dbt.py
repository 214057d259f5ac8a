"""Run the warehouse's dbt project (staging → intermediate → marts) in-process.

``tracehouse build`` and the tests call :func:`run_dbt`; plain ``dbt build
--profiles-dir .`` from the repository root runs the same project. dbt is
driven through :class:`dbt.cli.main.dbtRunner`, so no subprocess and no dbt
executable on ``PATH`` are needed.

The project reads the lake and writes ``tracehouse.duckdb`` in the folder
named by ``$TRACEHOUSE_WAREHOUSE`` (see ``profiles.yml`` and the ``lake``
source); :func:`run_dbt` sets that variable to the absolute warehouse path
for the length of the run, so the views it creates point at absolute paths
and keep working from any directory.

Commands that write the database (``build``, ``run``, ``seed``, ``test``,
``snapshot``) write a copy that is published when dbt is done
(:mod:`tracehouse.publish`), so readers are never blocked, and two of them
take turns. A plain ``build`` skips what needs no time: unit tests (the
test suite runs them), the lake's own invariants (tag ``lake``: ingest
guarantees them) and the intermediate models' tests (tag ``internal``: the
chain's own SQL, covered by the unit tests and the marts' tests), all of
which ``dbt build`` and the test suite still run; and it is
skipped entirely when neither the project nor the lake changed since the
last successful one; a changed project rebuilds with ``--full-refresh``
(:mod:`tracehouse.build_state`).

``--target spark`` runs the same project on Apache Spark (``profiles.yml``;
the ``spark`` extra): the same exclusions for a plain build, under the same
lock, but no copy and no skip, since Spark writes its own Parquet tables
(:mod:`tracehouse.spark_marts` reads them back).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tracehouse import parse_cache
from tracehouse.build_state import (
    args_fingerprint,
    build_arguments,
    changed_lake_tables,
    fingerprint,
    read_state,
    why_not_narrowed,
    write_state,
)
from tracehouse.dbt_import import import_dbt
from tracehouse.publish import (
    DATABASE_ENV_VAR,
    build_lock,
    discard_copy,
    prepare_copy,
    publish_copy,
)
from tracehouse.warehouse import ENV_VAR, LAKE_FORMAT, Warehouse

if TYPE_CHECKING:
    import click
    from dbt.cli.main import dbtRunnerResult

#: Exit codes shared by every tracehouse command.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: dbt subcommands that query the lake; they need at least one loaded trace.
_COMMANDS_READING_LAKE = frozenset({"build", "run", "test", "show"})
#: dbt subcommands that write the database: they run on a copy that is
#: published when they are done, under the warehouse's build lock.
_COMMANDS_WRITING_DATABASE = frozenset({"build", "run", "seed", "test", "snapshot"})
#: dbt subcommands whose models are incremental, hence refreshed when the
#: project changed since the last build.
_COMMANDS_BUILDING_MODELS = frozenset({"build", "run"})
#: What a plain ``tracehouse build`` leaves out (see the module docstring).
PLAIN_BUILD_EXCLUDES = (
    "--exclude-resource-type", "unit_test", "--exclude", "tag:lake", "tag:internal",
)

#: What a plain build narrowed to changed lake tables also leaves out: with
#: the project unchanged, seeds (and their tests) and the staging views
#: (which only name the lake's files) are already what they would become.
#: Views further down (fct_kernels) stay in: recreating one is cheap, and
#: their tests check the per-run lookups that the changed files re-resolve.
NARROWED_BUILD_EXCLUDES = (
    "--exclude-resource-type", "unit_test", "seed",
    "--exclude", "tag:lake", "tag:internal", "path:models/staging",
)

#: Folder inside the warehouse for dbt's artifacts (compiled SQL, manifest,
#: run results, logs), so that two warehouses never share them.
DBT_ARTIFACTS_DIR = "dbt"


class DbtBuildError(RuntimeError):
    """``dbt build`` did not succeed on a warehouse."""


def project_dir() -> Path:
    """Return the folder holding ``dbt_project.yml`` (the repository root).

    The package is installed editable, so the project sits next to it.
    """
    root = Path(__file__).resolve().parent.parent
    if not (root / "dbt_project.yml").is_file():
        raise FileNotFoundError(
            f"dbt project not found: {root / 'dbt_project.yml'} does not exist. "
            "tracehouse must be installed from its repository "
            "(pip install -e .) so that the dbt project ships with it."
        )
    return root


def has_loaded_traces(warehouse: Path) -> bool:
    """Tell whether the lake of ``warehouse`` holds at least one committed trace.

    A trace is committed once its ``lake/traces/run=<run>/<trace>.parquet``
    file exists (ingest renames it into place last); ``_empty.parquet`` only
    carries the schema.
    """
    traces = Warehouse(warehouse).table_dir("traces")
    if not traces.is_dir():
        return False
    return any(path.name != "_empty.parquet" for path in traces.rglob("*.parquet"))


def _refresh_lake_schema_files(warehouse: Warehouse) -> None:
    """Give a lake written before a raw table or column existed the schema files of now.

    Why: a staging view reads ``<table>/**/*.parquet``, which must match a
    file; a lake loaded before ``model_configs`` existed has no folder for
    it, and every build would fail until the next ingest created it. In the
    same way a column added to a table (``traces.has_op_shapes``) exists for
    the views only once the table's ``_empty.parquet`` has it (NULL in the
    older traces' files). Only the schema files are written (what any
    ingest writes first); the lake's format is not touched (an older format
    is refused above).
    """
    from tracehouse.ingest.lake import init_lake, schema_files_current

    # A lake of a newer format is another version's: its files are left alone.
    if warehouse.lake_format() == LAKE_FORMAT and not schema_files_current(warehouse):
        init_lake(warehouse)


def run_dbt(args: Sequence[str] = (), warehouse: Path | None = None) -> int:
    """Run a dbt command on a warehouse and return a tracehouse exit code.

    Args:
        args: dbt arguments, e.g. ``["build", "--select", "staging"]``. Empty,
            or starting with an option, means ``build`` (so ``tracehouse
            build -s stg_lake__slices`` works).
        warehouse: warehouse folder; ``None`` resolves it as every command
            does (``$TRACEHOUSE_WAREHOUSE``, else ``./warehouse``).

    Returns:
        0 on success, 1 when dbt failed (a model, test or compilation error)
        or the lake has no traces yet, 2 for a usage error (unknown command
        or option).

    ``--project-dir``, ``--profiles-dir``, ``--target-path`` and
    ``--log-path`` are added unless given; artifacts go under
    ``<warehouse>/dbt/`` so that runs on different warehouses never collide.
    """
    import_dbt()
    from dbt.cli.exceptions import DbtUsageException

    root = Warehouse.at(warehouse).root
    argv = list(args)
    if not argv or argv[0].startswith("-"):
        argv = ["build", *argv]

    command = _resolve_command(argv)
    if command is None:
        print(
            f"error: unknown dbt command {' '.join(argv[:2])!r}; "
            "try `tracehouse build` or `dbt --help`",
            file=sys.stderr,
        )
        return EXIT_USAGE
    path_len, click_command = command
    # dbt runs from the database's folder (parse_cache.beside_database), so
    # the paths the user gave are made absolute first.
    argv = _absolute_path_options(argv, click_command)

    problem = resource_settings_problem()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE

    lake_overridden = any("lake_root" in arg for arg in argv)
    if (
        argv[0] in _COMMANDS_READING_LAKE
        and not {"--help", "-h"} & set(argv)
        and not lake_overridden
        and not has_loaded_traces(root)
    ):
        print(
            f"error: warehouse {root} has no loaded traces "
            f"({Warehouse(root).table_dir('traces')} holds none), so there is "
            f"nothing to build. Load traces first: tracehouse ingest PATH "
            f"--warehouse {root}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if (
        argv[0] in _COMMANDS_READING_LAKE
        and not {"--help", "-h"} & set(argv)
        and not lake_overridden
        and (Warehouse(root).lake_format() or 0) < LAKE_FORMAT
    ):
        print(
            f"error: the lake of warehouse {root} was written by an older tracehouse "
            f"ingest (lake format {Warehouse(root).lake_format() or 1}; this version "
            f"reads {LAKE_FORMAT}: each slice carries its own context since 2). Load its "
            f"traces again: tracehouse ingest PATH... --warehouse {root} parses every "
            "trace of an older format again, keeping its id",
            file=sys.stderr,
        )
        return EXIT_FAILED

    if argv[0] in _COMMANDS_READING_LAKE and not lake_overridden:
        _refresh_lake_schema_files(Warehouse(root))

    try:
        project = project_dir()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    artifacts = root / DBT_ARTIFACTS_DIR
    defaults = {
        "project_dir": ("--project-dir", str(project)),
        "profiles_dir": ("--profiles-dir", str(project)),
        "target_path": ("--target-path", str(artifacts / "target")),
        "log_path": ("--log-path", str(artifacts / "logs")),
    }
    accepted = {param.name for param in click_command.params}
    added: list[str] = []
    for name, (flag, value) in defaults.items():
        if name in accepted and not _has_flag(argv, flag):
            added += [flag, value]
    if ("use_colors" in accepted and not _stdout_is_a_terminal()
            and not _wants_colours_decided(argv)):
        # dbt colours its lines whatever stdout is; a pipe or a file gets plain text.
        # Its own log file keeps its colours (they follow --use-colors unless told),
        # which benchmarks/dbt_statements.py reads entries by.
        added.append("--no-use-colors")
        if "use_colors_file" in accepted and not _wants_colours_decided(argv, "_FILE"):
            added.append("--use-colors-file")
    target = _target(argv)
    # Options that change only dbt's output (`--quiet`) leave a build plain.
    is_plain_build = build_arguments(_without_target(argv)) == ["build"]
    selection = list(PLAIN_BUILD_EXCLUDES) if is_plain_build else []

    if target == "spark" and not _spark_installed():
        print("error: --target spark needs dbt-spark and pyspark, which are not installed: "
              "pip install -e '.[spark]' (Spark also needs Java 17)", file=sys.stderr)
        return EXIT_USAGE
    if target is not None and target != "dev":
        # Another engine (the `spark` target): it writes its own tables, not
        # tracehouse.duckdb, so there is no copy to publish and no build
        # state to keep; the build lock still makes two builds take turns
        # (Spark's Derby metastore takes one process at a time).
        invocation = [*argv[:path_len], *added, *selection, *argv[path_len:]]
        with build_lock(root), _environment(ENV_VAR, str(root)):
            result = _invoke(invocation)
        return _exit_code(result, argv, root)

    own_target = artifacts / "target" if "--target-path" in added else None
    if argv[0] not in _COMMANDS_WRITING_DATABASE or {"--help", "-h"} & set(argv):
        invocation = [*argv[:path_len], *added, *selection, *argv[path_len:]]
        database = Path(os.environ.get(DATABASE_ENV_VAR) or Warehouse(root).database)
        with _environment(ENV_VAR, str(root)):
            result = _invoke(invocation, database, own_target, project)
        return _exit_code(result, argv, root)

    with build_lock(root):
        state = fingerprint(project, Warehouse(root).lake, argv, location=root)
        last = read_state(artifacts)
        database_exists = Warehouse(root).database.exists()
        if is_plain_build and database_exists and last == state:
            print(f"warehouse {root} is up to date: neither the project nor the lake "
                  "changed since the last build (nothing to do)")
            return EXIT_OK
        if is_plain_build and database_exists:
            changed = changed_lake_tables(last, state)
            narrowed = _narrowed_selection(changed, artifacts)
            if narrowed == []:
                print(f"warehouse {root} is up to date: only lake tables no model "
                      "reads changed since the last build (nothing to do)")
                write_state(artifacts, state)
                return EXIT_OK
            if narrowed is not None:
                selection = ["--select", *narrowed, *NARROWED_BUILD_EXCLUDES]
                tables = ", ".join(selector.split(".")[-1].rstrip("+") for selector in narrowed)
                print(f"lake tables changed since the last build: {tables}; "
                      "building the models that read them")
            elif last is not None and last.project == state.project:
                # (A changed project says so below, with its --full-refresh.)
                why = (why_not_narrowed(last, state) if changed is None else
                       "no manifest of the last build tells which models read the lake")
                print(f"{why}: building every model")
        if (argv[0] in _COMMANDS_BUILDING_MODELS and database_exists
                and (last is None or last.project != state.project)
                and not _has_flag(argv, "--full-refresh")):
            # Incremental rows computed by other code (or by a build this
            # warehouse kept no record of) must not mix with new ones.
            why = ("the dbt project (or its --vars) changed since the last build"
                   if last is not None else "no record of how this database was built")
            print(f"{why}: rebuilding every incremental table (--full-refresh)")
            added.append("--full-refresh")
        invocation = [*argv[:path_len], *added, *selection, *argv[path_len:]]
        copy = prepare_copy(root)
        try:
            with _environment(ENV_VAR, str(root)):
                result = _invoke(invocation, copy, own_target, project)
        except BaseException:
            discard_copy(root)
            raise
        if isinstance(result.exception, DbtUsageException):
            discard_copy(root)
        else:
            publish_copy(root)
        if result.success and argv[0] in _COMMANDS_BUILDING_MODELS:
            write_state(artifacts, state)
    return _exit_code(result, argv, root)


def _invoke(invocation: list[str], duckdb_database: Path | None = None,
            target: Path | None = None, project: Path | None = None) -> dbtRunnerResult:
    """Run dbt in-process, then close the database it opened.

    ``duckdb_database``: the DuckDB file dbt writes or reads; dbt runs from
    its folder with the profile's paths relative to it, so that the parse
    saved from another warehouse stays valid; ``target`` (tracehouse's
    own target folder) starts from the last saved parse of ``project``,
    which is kept again afterwards (:mod:`tracehouse.parse_cache`).

    profiles.yml keeps dbt-duckdb's database open for the whole run
    (``keep_open: true``) so that its ~180 nodes share one DuckDB instance
    instead of reopening (and checkpointing) the file between nodes; measured
    on 256 ranks, about 1.5 s of a 20 s incremental build. dbt-duckdb would
    keep it open after the run too, which would stop this process from
    opening the file again (publishing the copy, ``tracehouse demo``'s
    report), so it is closed here.
    """
    from dbt.cli.main import dbtRunner

    if target is not None and project is not None:
        parse_cache.restore(target, project)
    try:
        if duckdb_database is None:
            return dbtRunner().invoke(invocation)
        with parse_cache.beside_database(DATABASE_ENV_VAR, duckdb_database):
            return dbtRunner().invoke(invocation)
    finally:
        _release_duckdb()
        if target is not None and project is not None:
            parse_cache.save(target, project)


def _release_duckdb() -> None:
    """Close the DuckDB database dbt-duckdb keeps open in this process, if any."""
    try:
        from dbt.adapters.duckdb.connections import DuckDBConnectionManager
    except ImportError:  # dbt-duckdb not installed (a Spark-only environment)
        return
    environment = DuckDBConnectionManager._ENV
    if environment is not None:
        environment.close()
        DuckDBConnectionManager._ENV = None


def _narrowed_selection(changed: list[str] | None, artifacts: Path) -> list[str] | None:
    """dbt selectors (``source:lake.<table>+``) for the changed lake tables that
    the project reads, per the last build's manifest; None when the build must
    not be narrowed (no comparable last build, or no manifest to tell which
    tables are sources)."""
    if changed is None:
        return None
    import json

    try:
        manifest = json.loads((artifacts / "target" / "manifest.json").read_text())
        sources = {
            source["name"]: source["source_name"]
            for source in manifest["sources"].values()
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [f"source:{sources[table]}.{table}+" for table in changed if table in sources]


def _exit_code(result: dbtRunnerResult, argv: Sequence[str], root: Path) -> int:
    """Map a dbt result to a tracehouse exit code, printing dbt's exception if any."""
    from dbt.cli.exceptions import DbtUsageException

    if result.success:
        return EXIT_OK
    if isinstance(result.exception, DbtUsageException):
        print(f"error: {result.exception}", file=sys.stderr)
        return EXIT_USAGE
    if result.exception is not None:
        print(
            f"error: dbt {argv[0]} failed on warehouse {root}: {result.exception}", file=sys.stderr
        )
    return EXIT_FAILED


def resource_settings_problem() -> str | None:
    """What is wrong with the resource variables profiles.yml reads, or None.

    Checked before dbt starts, so a typo reads as one line naming the
    variable instead of a DuckDB parser error deep in dbt's log.
    """
    import duckdb

    limit = os.environ.get("TRACEHOUSE_MEMORY_LIMIT")
    if limit is not None:
        con = duckdb.connect()
        try:
            con.execute(f"set memory_limit = '{limit.replace(chr(39), chr(39) * 2)}'")
        except duckdb.Error as exc:
            return (f"TRACEHOUSE_MEMORY_LIMIT={limit!r} is not a DuckDB memory limit "
                    f"({str(exc).splitlines()[0]}); write it like 8GB or 60%")
        finally:
            con.close()
    threads = os.environ.get("TRACEHOUSE_DBT_THREADS")
    if threads is not None and not (threads.strip().isdigit() and int(threads) > 0):
        return f"TRACEHOUSE_DBT_THREADS={threads!r} is not a positive whole number"
    return None


def is_up_to_date(warehouse: Path, args: Sequence[str]) -> bool:
    """True when ``run_dbt(args)`` would build nothing new: the last successful build of
    ``warehouse`` ran these arguments (or a plain build, which builds every model) on
    the same project, the same lake and in the same folder, and its database is there.

    For callers that build a selection of their own (``tracehouse nsys``); a plain
    ``tracehouse build`` makes the same check itself.
    """
    root = Warehouse.at(warehouse).root
    if not Warehouse(root).database.exists():
        return False
    last = read_state(root / DBT_ARTIFACTS_DIR)
    now = fingerprint(project_dir(), Warehouse(root).lake, list(args), location=root)
    return (last is not None
            and (last.project, last.lake, last.location) == (now.project, now.lake, now.location)
            and last.args in (now.args, args_fingerprint(["build"])))


def build_warehouse(warehouse: Path, args: Sequence[str] = ()) -> None:
    """Run ``dbt build`` (plus ``args``) on ``warehouse``; raise if it does not pass.

    Raises:
        DbtBuildError: a model or test failed, or the lake has no traces.
    """
    code = run_dbt(["build", *args], warehouse)
    if code != EXIT_OK:
        raise DbtBuildError(
            f"dbt build failed on warehouse {Path(warehouse).resolve()} (exit code {code}); "
            "see the dbt output above"
        )


def _absolute_path_options(argv: Sequence[str], click_command: click.Command) -> list[str]:
    """``argv`` with the values of the command's path options (``--state``,
    ``--target-path``, ...) made absolute against the current folder."""
    import click

    path_options = {opt for param in click_command.params
                    if isinstance(param.type, click.Path) for opt in param.opts}
    absolute: list[str] = []
    expects_path = False
    for arg in argv:
        if expects_path:
            absolute.append(os.path.abspath(arg))
            expects_path = False
        elif arg in path_options:
            absolute.append(arg)
            expects_path = True
        elif "=" in arg and arg.split("=", 1)[0] in path_options:
            option, value = arg.split("=", 1)
            absolute.append(f"{option}={os.path.abspath(value)}")
        else:
            absolute.append(arg)
    return absolute


def _resolve_command(argv: Sequence[str]) -> tuple[int, click.Command] | None:
    """Find the dbt click command named by ``argv`` and how many words name it.

    Groups such as ``docs generate`` take two words; flags go after them.
    """
    import click
    from dbt.cli.main import cli

    command = cli.commands.get(argv[0])
    if command is None:
        return None
    if isinstance(command, click.Group):
        if len(argv) < 2 or argv[1] not in command.commands:
            return None
        return 2, command.commands[argv[1]]
    return 1, command


def _spark_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None
               for name in ("pyspark", "dbt.adapters.spark"))


def _target(argv: Sequence[str]) -> str | None:
    """The dbt target named by ``--target NAME``/``-t NAME``/``--target=NAME``, else None."""
    for index, arg in enumerate(argv):
        if arg in ("--target", "-t") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--target="):
            return arg.split("=", 1)[1]
    return None


def _without_target(argv: Sequence[str]) -> list[str]:
    """``argv`` less its target option (so ``build --target spark`` is a plain build)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--target", "-t"):
            skip = True
        elif not arg.startswith("--target="):
            kept.append(arg)
    return kept


def _wants_colours_decided(argv: Sequence[str], of: str = "") -> bool:
    """The user chose dbt's colours (``of="_FILE"``: its log file's): ``--use-colors``/
    ``--no-use-colors`` (``--use-colors-file``/...), or the variables dbt reads them from."""
    flag = "use-colors" + of.lower().replace("_", "-")
    return (any(_has_flag(argv, option) for option in (f"--{flag}", f"--no-{flag}"))
            or any(name in os.environ
                   for name in (f"DBT_USE_COLORS{of}", f"DBT_ENGINE_USE_COLORS{of}")))


def _stdout_is_a_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the duration of the block, then restore it."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous
