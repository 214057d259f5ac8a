"""Builds that never block readers: dbt writes a copy, which is swapped in when done.

Why: DuckDB lets one process open a database file for writing and then no
other process may open it at all, not even read-only. A scheduled
``tracehouse report`` or an analyst's ``tracehouse sql`` would fail for the
whole length of a build. So ``tracehouse build`` copies the last published
``tracehouse.duckdb`` into ``<warehouse>/.build/`` (same file name, so the
catalog name that dbt writes into views stays ``tracehouse``), points dbt
at the copy (``$TRACEHOUSE_DATABASE``, read by ``profiles.yml``), and
renames the finished copy over the published file. Readers open the
published file by path: one opened before the rename keeps reading the old
file, one opened after reads the new one, and none ever waits.

Two builds of one warehouse take turns through an exclusive ``flock`` on
``<warehouse>/.build.lock`` (one host; on a shared filesystem across hosts,
run builds from one host); an ingest that writes the lake holds it shared
until it ends, so a build waits for it and it waits for a build (one
host's ingests: shards on other hosts are not held off). A build that
dies leaves the published file as it was; its half-written copy is
removed by the next build.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from tracehouse.core.warehouse import DATABASE_FILE, Warehouse

#: Folder inside the warehouse where a build writes its copy of the database.
BUILD_DIR = ".build"
#: Lock file two builds of one warehouse take turns on.
BUILD_LOCK = ".build.lock"
#: Environment variable profiles.yml reads the database path from.
DATABASE_ENV_VAR = "TRACEHOUSE_DATABASE"


def building_database(warehouse: Path) -> Path:
    """Where a build of ``warehouse`` writes its database before publishing it."""
    return Path(warehouse) / BUILD_DIR / DATABASE_FILE


@contextmanager
def build_lock(warehouse: Path, *, shared: bool = False, waiting: str | None = None,
               stream: TextIO | None = None) -> Iterator[None]:
    """Hold the warehouse's build lock; say so once (``waiting``, on ``stream``,
    default stderr) when it is taken.

    A build holds it exclusively. Ingest holds it shared from its first
    write to the lake to its end (:mod:`ingest.runner`): a build then never
    sees traces land, or a changed trace's files replaced, halfway through
    (its models list the loaded traces one by one, as each compiles), and
    the build lock adds no wait between ingests (the shards of one load;
    plain ingests still take turns on the ingest lock). A build waits for
    every ingest holding it to end, so overlapping ingests can delay a
    build. ``flock``: one host's processes only, like the ingest lock.
    """
    root = Path(warehouse)
    root.mkdir(parents=True, exist_ok=True)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with open(root / BUILD_LOCK, "a+b") as handle:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            print(waiting or f"waiting for another build or an ingest of {root} to finish ...",
                  file=stream or sys.stderr, flush=True)
            fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_copy(warehouse: Path) -> Path:
    """Copy the published database (and any write-ahead log) to the build folder.

    Returns the copy's path. Incremental models need the previous tables, so
    the copy starts from what readers see now; a missing database starts empty.
    """
    published = Warehouse(warehouse).database
    copy = building_database(warehouse)
    shutil.rmtree(copy.parent, ignore_errors=True)
    copy.parent.mkdir(parents=True)
    for suffix in ("", ".wal"):
        source = published.with_name(published.name + suffix)
        if source.exists():
            shutil.copyfile(source, copy.with_name(copy.name + suffix))
    return copy


def publish_copy(warehouse: Path) -> None:
    """Swap the finished copy in for the published database, atomically.

    The copy is checkpointed first, so it is one self-contained file; the
    published file's own write-ahead log (left by a plain ``dbt`` run that
    was killed) was replayed into the copy and is removed.
    """
    import duckdb

    copy = building_database(warehouse)
    published = Warehouse(warehouse).database
    if not copy.exists():
        return
    con = duckdb.connect(str(copy))
    try:
        con.execute("checkpoint")
    finally:
        con.close()
    os.replace(copy, published)
    published.with_name(published.name + ".wal").unlink(missing_ok=True)
    shutil.rmtree(copy.parent, ignore_errors=True)


def discard_copy(warehouse: Path) -> None:
    """Remove a build's unfinished copy (the published database stays as it was)."""
    shutil.rmtree(building_database(warehouse).parent, ignore_errors=True)
