"""Load an Nsight Systems export into a warehouse and build the marts its views read.

A file the warehouse already holds is not loaded again (same path, else
same content), and the marts are not rebuilt when nothing changed, so a
second view of the same file costs a query, not an ingest and a build.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from tracehouse.nsys_views import NsysViewError

#: The marts each view reads, built with everything they are built from (dbt
#: selectors): the general marts every trace has, and the Nsight marts for what no
#: general mart answers. Per view, so that ``summary`` does not wait for the NVTX
#: tree (the costliest models on a large export), nor for the step chain of
#: ``fct_rank_iterations``: its span figures per GPU are ``fct_nsys_gpu_overlap``.
VIEW_MARTS = {
    "info": ("+fct_kernels", "+fct_annotation_ranges"),
    "summary": ("+fct_kernels", "+fct_nsys_gpu_overlap"),
    "overlap": ("+fct_kernels", "+fct_nsys_gpu_overlap"),
    "nccl": ("+fct_kernels",),
    "iters": ("+fct_nsys_iterations",),
    "tree": ("+fct_annotation_ranges",),
}
#: DuckDB's ``memory_limit`` for the views' build, unless ``TRACEHOUSE_MEMORY_LIMIT``
#: sets one (profiles.yml reads it). Why: with the profile's default (60% of RAM) DuckDB
#: keeps what the build reads cached up to the limit, and on a 713 MB export (8.8 M
#: slices) the summary's build peaked at 3.6 GiB, more than its ingest; at 1 GB it
#: peaks at 1.35 GiB with the same figures, spilling what does not fit to the
#: warehouse's temp folder (a few CPU seconds more). A view is a one-off command,
#: often beside other work, not a CI build that may take the machine.
VIEW_BUILD_MEMORY_LIMIT = "1GB"
MEMORY_LIMIT_VARIABLE = "TRACEHOUSE_MEMORY_LIMIT"
#: What the views' build leaves out of the selection (see :func:`build_marts`).
BUILD_EXCLUDES = ("--exclude-resource-type", "test", "--exclude-resource-type", "unit_test",
                  "--exclude-resource-type", "seed")
#: Every view's marts, once each.
ALL_VIEW_MARTS = tuple(dict.fromkeys(m for marts in VIEW_MARTS.values() for m in marts))


def is_temporary(warehouse: str | Path | None, trim: bool) -> bool:
    """Whether the views load into a temporary warehouse (:func:`warehouse_for`)."""
    return warehouse is None or trim


@contextlib.contextmanager
def warehouse_for(warehouse: str | Path | None, trim: bool) -> Iterator[Path]:
    """The warehouse folder to load into: ``warehouse``, else (or when the views are
    trimmed to a capture window) a temporary one, removed afterwards."""
    if not is_temporary(warehouse, trim):
        yield Path(warehouse).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="tracehouse-nsys-") as tmp:
        yield Path(tmp)


def devices(root: Path, trace_ids: list[str]) -> list[int]:
    """The CUDA devices of the file's traces (one trace per GPU), in order."""
    glob = str(root / "lake" / "traces" / "**" / "*.parquet")
    with duckdb.connect() as con:
        rows = con.execute(
            "select distinct (distributed_info::json ->> 'nsys_device')::bigint as device "
            "from read_parquet(?, union_by_name = true) "
            "where trace_id in (select unnest(?::varchar[])) order by 1",
            [glob, trace_ids]).fetchall()
    return [row[0] for row in rows if row[0] is not None]


def ingest_file(file: Path, root: Path) -> list[str]:
    """Load ``file`` into warehouse ``root``; its trace ids by rank.

    A file the warehouse already holds is reused, never loaded a second
    time as another run: by its path (in whichever run it was loaded, e.g.
    by ``tracehouse ingest``; reloaded there if it changed since), else by
    its content (a copy at another path). Otherwise it is loaded into run
    ``nsys-<stem>``. Incremental: a file loaded and unchanged is not read again.
    """
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.ingest import lake
    from tracehouse.ingest.discover import sanitize_run_name
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.ingest.trace_types import display_path

    path = display_path(file.resolve())
    manifest = lake.read_manifest(Warehouse(root)) if (root / "lake").is_dir() else []
    same_path = sorted(e.run_id for e in manifest if e.path == path)
    if not same_path and manifest:
        same_content = _same_content(file, manifest)
        if same_content:
            print(f"note: {path} has the same content as {same_content[0].path}, already in "
                  f"run {same_content[0].run_id!r} of {root}: showing that", file=sys.stderr)
            return [e.trace_id for e in same_content]
    run_id = same_path[0] if same_path else sanitize_run_name(f"nsys-{file.stem}")
    result = ingest_paths([file], warehouse=root, run=run_id, jobs=1, progress=False,
                          stream=sys.stderr)
    if result.failed:  # ingest already printed why, one line per file
        raise NsysViewError(f"{display_path(file)}: not loaded, so there is nothing to show")
    rows = sorted((e for e in lake.read_manifest(Warehouse(root))
                   if e.run_id == run_id and e.path == path), key=lambda e: e.rank)
    if not rows:
        raise NsysViewError(f"{file}: nothing was loaded from it")
    return [e.trace_id for e in rows]


def _same_content(file: Path, manifest: list[Any]) -> list[Any]:
    """The loaded traces (one run's, by rank) whose file had the bytes of ``file``."""
    from tracehouse.ingest.nsys.load import file_hash
    from tracehouse.ingest.trace_types import TraceError

    try:
        digest = file_hash(file)
    except TraceError:
        return []  # unreadable: ingest reports it
    found = [e for e in manifest if e.content_hash == digest]
    runs = sorted({e.run_id for e in found})
    return sorted((e for e in found if e.run_id == runs[0]), key=lambda e: e.rank) if runs else []


def build_marts(root: Path, trim: tuple[float, float] | None = None,
                marts: tuple[str, ...] = ALL_VIEW_MARTS, *, throwaway: bool = False) -> None:
    """Build ``marts`` (dbt selectors; default: every view's) and what they are built
    from, for the capture window ``trim`` in seconds when given.

    Models only: no tests (a view, not a CI run), and no seed nodes, whose tables
    the project's on-run-start hook loads from their CSVs when the warehouse lacks
    them or the build refreshes everything (macros/seeds.sql), in milliseconds
    instead of a dbt node each (~0.3 CPU s apiece). ``throwaway``: the warehouse
    is removed after the view (a temporary one), so dbt writes no artifacts
    (``manifest.json`` twice, ``run_results.json``: seconds of a cold summary),
    which only a later build of the same warehouse would read.
    """
    from tracehouse.build.dbt import run_dbt

    variables: dict[str, int] = {}
    if trim is not None:
        variables = {"capture_window_start_ns": round(trim[0] * 1e9),
                     "capture_window_end_ns": round(trim[1] * 1e9)}
    args = ["build", "--quiet", "--select", *marts, *BUILD_EXCLUDES]
    if throwaway:
        args.append("--no-write-json")
    if variables:
        args += ["--vars", json.dumps(variables)]
    from tracehouse.build.dbt import is_up_to_date

    if is_up_to_date(root, args):
        return  # neither the project nor the lake changed since these marts were built
    # dbt runs quiet; say what the seconds are spent on.
    print(f"building the marts for the Nsight views in {root} (dbt build, about 10 s)…",
          file=sys.stderr, flush=True)
    with contextlib.redirect_stdout(sys.stderr), bounded_memory():
        code = run_dbt(args, root)
    if code != 0:
        raise NsysViewError(f"building the marts in {root} failed (dbt exit {code})")


@contextlib.contextmanager
def bounded_memory() -> Iterator[None]:
    """:data:`VIEW_BUILD_MEMORY_LIMIT` as DuckDB's memory limit while the views' marts
    build, unless the user set ``TRACEHOUSE_MEMORY_LIMIT`` (kept as given)."""
    if os.environ.get(MEMORY_LIMIT_VARIABLE):
        yield
        return
    os.environ[MEMORY_LIMIT_VARIABLE] = VIEW_BUILD_MEMORY_LIMIT
    try:
        yield
    finally:
        os.environ.pop(MEMORY_LIMIT_VARIABLE, None)
