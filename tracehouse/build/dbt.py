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
(:mod:`tracehouse.core.publish`), so readers are never blocked, and two of them
take turns. A plain ``build`` skips what needs no time: unit tests (the
test suite runs them), the lake's own invariants (tag ``lake``: ingest
guarantees them), the intermediate models' tests (tag ``internal``: the
chain's own SQL, covered by the unit tests and the marts' tests) and the
seed nodes with their row checks (the CSVs are loaded by an on-run-start
hook when missing or changed: macros/seeds.sql), all of
which ``dbt build`` and the test suite still run; and it is
skipped entirely when neither the project nor the lake changed since the
last successful one. After a change of the project the per-trace tables
that the change makes stale (dbt's ``state:modified+``) are built whole
again, the others keep their rows (:mod:`tracehouse.build.stale`); a
change of vars, profile or materializations rebuilds with
``--full-refresh`` (:mod:`tracehouse.build.state`).

``--target spark`` runs the same project on Apache Spark (``profiles.yml``;
the ``spark`` extra): the same exclusions for a plain build, under the same
lock, but no copy and no skip, since Spark writes its own Parquet tables
(tests/spark_marts.py reads them back).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracehouse.build import parse_cache
from tracehouse.build.dbt_arguments import (
    absolute_path_options,
    has_flag,
    option_value,
    resolve_command,
    stdout_is_a_terminal,
    target_name,
    wants_colours_decided,
    without_option,
    without_target,
)
from tracehouse.build.dbt_import import import_dbt
from tracehouse.build.preconditions import lake_problem, resource_settings_problem, spark_installed
from tracehouse.build.stale import (
    drop_relations,
    keep_manifest,
    parse_options,
    relation_names,
    stale_relations,
)
from tracehouse.build.state import (
    BuildFingerprint,
    args_fingerprint,
    build_arguments,
    changed_lake_tables,
    fingerprint,
    read_state,
    why_not_narrowed,
    write_state,
)
from tracehouse.core.publish import (
    DATABASE_ENV_VAR,
    build_lock,
    discard_copy,
    prepare_copy,
    publish_copy,
)
from tracehouse.core.warehouse import ENV_VAR, Warehouse

if TYPE_CHECKING:
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
#: dbt subcommands that build the per-trace models, hence refresh what a change
#: of the project since the last build made stale.
_COMMANDS_BUILDING_MODELS = frozenset({"build", "run"})
#: Options that narrow what a dbt command builds: a build with none of them
#: builds every model, so its per-trace tables all follow the project's code.
_SELECTION_OPTIONS = ("--select", "-s", "--models", "-m", "--exclude", "--selector",
                      "--resource-type", "--resource-types", "--exclude-resource-type",
                      "--exclude-resource-types", "--inline")
#: What a plain ``tracehouse build`` leaves out (see the module docstring).
#: Seed nodes (and, excluded with them, their row checks) too: the project's
#: on-run-start hook loads a seed table from its CSV when the warehouse lacks
#: it or the build refreshes everything (macros/seeds.sql), which a changed
#: CSV always causes (:mod:`tracehouse.build.state`).
PLAIN_BUILD_EXCLUDES = (
    "--exclude-resource-type", "unit_test",
    "--exclude", "tag:lake", "tag:internal", "resource_type:seed",
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

#: dbt's file log (``<warehouse>/dbt/logs/dbt.log``) at ``info``, not dbt's default
#: ``debug``, unless the command line or ``DBT_LOG_LEVEL_FILE`` says otherwise. Why:
#: formatting and writing the debug lines (every statement, every cache action) was
#: ~11% of a small build's CPU (py-spy of a 3-trace build: ``fire_event`` 11.4% of the
#: samples; A B B A: 28.6, 28.3 CPU s at debug against 24.8, 25.9 at info), whatever
#: the data. Errors, warnings and each node's result stay in the file; the benchmarks
#: and tests that read the SQL statements from it set ``DBT_LOG_LEVEL_FILE=debug``.
FILE_LOG_LEVEL = "info"
FILE_LOG_LEVEL_ENV = "DBT_LOG_LEVEL_FILE"

#: Folder inside the warehouse for dbt's artifacts (compiled SQL, manifest,
#: run results, logs), so that two warehouses never share them.
DBT_ARTIFACTS_DIR = "dbt"


class DbtBuildError(RuntimeError):
    """``dbt build`` did not succeed on a warehouse."""


def project_dir() -> Path:
    """Return the folder holding ``dbt_project.yml`` (the repository root).

    The package is installed editable, so the project sits next to it.
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / "dbt_project.yml").is_file():
        raise FileNotFoundError(
            f"dbt project not found: {root / 'dbt_project.yml'} does not exist. "
            "tracehouse must be installed from its repository "
            "(pip install -e .) so that the dbt project ships with it."
        )
    return root


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

    command = resolve_command(argv)
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
    argv = absolute_path_options(argv, click_command)

    problem = resource_settings_problem()
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE

    lake_overridden = any("lake_root" in arg for arg in argv)
    if (
        argv[0] in _COMMANDS_READING_LAKE
        and not {"--help", "-h"} & set(argv)
        and not lake_overridden
        and (problem := lake_problem(root)) is not None
    ):
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_FAILED

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
        if name in accepted and not has_flag(argv, flag):
            added += [flag, value]
    if ("log_level_file" in accepted and not has_flag(argv, "--log-level-file")
            and not os.environ.get(FILE_LOG_LEVEL_ENV)):
        added += ["--log-level-file", FILE_LOG_LEVEL]
    if ("use_colors" in accepted and not stdout_is_a_terminal()
            and not wants_colours_decided(argv)):
        # dbt colours its lines whatever stdout is; a pipe or a file gets plain text.
        # Its own log file keeps its colours (they follow --use-colors unless told),
        # which benchmarks/dbt_statements.py reads entries by.
        added.append("--no-use-colors")
        if "use_colors_file" in accepted and not wants_colours_decided(argv, "_FILE"):
            added.append("--use-colors-file")
    target = target_name(argv)
    # Options that change only dbt's output (`--quiet`) leave a build plain, and so
    # do `--vars`: they change what the models compute, not what a plain build
    # selects, so `build --vars '{whatif: false}'` (the what-if models left out, for
    # very large builds) is not made dearer by every unit and lake test. The vars
    # are in the build state's fingerprints, so such a build never skips or narrows
    # on a build with other vars, and rebuilds with --full-refresh after one.
    is_plain_build = build_arguments(without_option(without_target(argv), "--vars")) == ["build"]
    selection = list(PLAIN_BUILD_EXCLUDES) if is_plain_build else []

    if target == "spark" and not spark_installed():
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
        copy = prepare_copy(root)
        try:
            stale, refresh_all = _stale_tables(argv, added, is_plain_build, last, state,
                                               artifacts, copy, own_target, project)
        except BaseException:
            discard_copy(root)
            raise
        if refresh_all:
            added.append("--full-refresh")
        # The per-trace tables follow the project's code after this build when
        # it rebuilt what the change made stale for every model: then its
        # project and manifest are what the next build compares with.
        whole = not any(has_flag(argv, option) for option in _SELECTION_OPTIONS)
        follows_code = (not database_exists or last is None or last.project == state.project
                        or is_plain_build or ((refresh_all or has_flag(argv, "--full-refresh"))
                                              and whole))
        invocation = [*argv[:path_len], *added, *selection, *argv[path_len:]]
        drop_relations(copy, stale)
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
            if follows_code:
                write_state(artifacts, state)
                keep_manifest(artifacts)
            elif last is not None:
                # A selection built with another project: some per-trace tables
                # may hold rows of the old code, which the next build must see.
                write_state(artifacts, replace(state, project=last.project,
                                               settings=last.settings))
    return _exit_code(result, argv, root)


def _stale_tables(
    argv: Sequence[str], added: Sequence[str], is_plain_build: bool,
    last: BuildFingerprint | None, state: BuildFingerprint, artifacts: Path,
    copy: Path, own_target: Path | None, project: Path,
) -> tuple[list[str], bool]:
    """What a build must rebuild whole because the project changed since the last one:
    (the per-trace tables and seeds to drop from the copy first, whether to add
    ``--full-refresh`` instead), and the line saying so.

    Per-trace rows computed by other code (or by a build this warehouse kept no
    record of) must not mix with new ones. A plain build whose vars, profile and
    materializations are unchanged asks dbt which tables the change touched
    (:func:`tracehouse.build.stale.stale_relations`); anything else refreshes all.
    """
    if (argv[0] not in _COMMANDS_BUILDING_MODELS or not copy.exists()
            or (last is not None and last.project == state.project)
            or has_flag(argv, "--full-refresh")):
        return [], False
    found = None
    if is_plain_build and last is not None and last.settings == state.settings:
        found = stale_relations(
            artifacts, lambda ls: _invoke([*ls, *added], copy, own_target, project),
            parse_options(argv))
    if found is not None:
        print("the dbt project changed since the last build: "
              + (f"rebuilding {len(found)} table(s) it made stale "
                 f"({', '.join(relation_names(found))})" if found
                 else "no table it holds is stale"))
        return found, False
    why = ("no record of how this database was built" if last is None
           else "the project's vars, profile or materializations changed since the last build"
           if last.settings != state.settings
           else "the dbt project changed since the last build, and no manifest of that "
           "build tells which tables it made stale" if is_plain_build
           else "the dbt project (or its --vars) changed since the last build")
    print(f"{why}: rebuilding every per-trace table (--full-refresh)")
    return [], True


def _invoke(invocation: list[str], duckdb_database: Path | None = None,
            target: Path | None = None, project: Path | None = None) -> dbtRunnerResult:
    """Run dbt in-process, then close the database it opened.

    ``duckdb_database``: the DuckDB file dbt writes or reads; dbt runs from
    its folder with the profile's paths relative to it, so that the parse
    saved from another warehouse stays valid; ``target`` (tracehouse's
    own target folder) starts from the last saved parse of ``project``
    with the invocation's ``--vars`` and ``--target``, which is kept again
    afterwards (:mod:`tracehouse.build.parse_cache`).

    profiles.yml keeps dbt-duckdb's database open for the whole run
    (``keep_open: true``) so that its ~180 nodes share one DuckDB instance
    instead of reopening (and checkpointing) the file between nodes; measured
    on 256 ranks, about 1.5 s of a 20 s incremental build. dbt-duckdb would
    keep it open after the run too, which would stop this process from
    opening the file again (publishing the copy, ``tracehouse demo``'s
    report), so it is closed here.
    """
    from dbt.cli.main import dbtRunner

    variant = parse_cache.variant_of(option_value(invocation, "--vars"),
                                     target_name(invocation),
                                     os.environ.get(parse_cache.MEMORY_LIMIT_ENV_VAR))
    if target is not None and project is not None:
        parse_cache.restore(target, project, variant)
    try:
        if duckdb_database is None:
            return dbtRunner().invoke(invocation)
        with parse_cache.beside_database(DATABASE_ENV_VAR, duckdb_database):
            return dbtRunner().invoke(invocation)
    finally:
        _release_duckdb()
        if target is not None and project is not None:
            parse_cache.save(target, project, variant)


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
