"""The Parquet lake on disk: atomic writes, commits, the manifest and recovery.

Layout inside ``<warehouse>/lake``::

    <table>/_empty.parquet                  zero rows, the table's schema
    <table>/_common_metadata                the schema again, as a Parquet summary file
    <table>/run=<run_id>/<trace_id>.parquet one file per loaded trace
    ingest_errors/run=<run_id>/<key>.parquet one file per failing path

Why this shape: one file per trace makes a load and a reload a matter of
renaming files (no rewrite of shared files, no lost updates between two
processes), and ``_empty.parquet`` keeps every glob non-empty so readers
(dbt sources, ``tracehouse sql``) work on a new warehouse. Spark skips
files whose names start with ``_`` except Parquet summary files, so
``_common_metadata`` is what gives its readers (the ``spark`` dbt target) the
schema of a table no trace has rows for yet.

Commit protocol: every table of a trace is written to a hidden temporary
file in its final folder, then renamed into place with ``traces`` last.
A row in ``traces`` is therefore the commit marker, and also the manifest:
re-runs compare path, size, mtime and content hash against it. Readers keep
only rows whose ``trace_id`` is in ``traces``, and :func:`recover` deletes
temporaries and orphans that a crash left behind. A path's error records
(``ingest_errors``, in every run) are removed just before its commit: a
crash in between leaves the path neither loaded nor failed, so the next
ingest loads it, where a stale error beside a loaded, unchanged file would
stay for good.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracehouse.core.warehouse import Warehouse

from .annotation_context import annotation_ranges
from .numpy_arrow import arrow_array
from .parquet_writer import ParquetWriter, write_schema_file
from .schema import LAKE_FORMAT, LAKE_TABLES, TRACE_TABLES
from .slice_context import with_context

EMPTY_FILE = "_empty.parquet"
SCHEMA_FILE = "_common_metadata"
TMP_SUFFIX = ".tmp"


def init_lake(warehouse: Warehouse) -> None:
    """Create the lake folders and their ``_empty.parquet`` and ``_common_metadata`` schema files.

    Safe with other writers at once, on other hosts too: each file is written
    to a temporary named with a random token and renamed into place, and all
    writers write the same bytes' worth of schema.
    """
    token = f"init{uuid.uuid4().hex[:12]}"
    for table, table_schema in LAKE_TABLES.items():
        folder = warehouse.table_dir(table)
        folder.mkdir(parents=True, exist_ok=True)
        empty = folder / EMPTY_FILE
        # Rewritten when the schema changed too: a model with no pending trace
        # reads only this file, so it must carry every column (lake_scan).
        if not empty.exists() or not _same_schema(empty, table_schema):
            tmp = write_parquet_tmp(table_schema.empty_table(), empty, token=token)
            os.replace(tmp, empty)
        summary = folder / SCHEMA_FILE
        if not summary.exists() or not _same_schema(summary, table_schema):
            tmp = summary.with_name(f".{summary.name}.{token}{TMP_SUFFIX}")
            write_schema_file(table_schema, tmp)
            os.replace(tmp, summary)
    if warehouse.lake_format() != LAKE_FORMAT:
        marker = warehouse.lake_format_file
        tmp = marker.with_name(f".{marker.name}.{token}{TMP_SUFFIX}")
        tmp.write_text(f"{LAKE_FORMAT}\n")
        os.replace(tmp, marker)


def _same_schema(summary: Path, table_schema: pa.Schema) -> bool:
    import pyarrow.parquet as pq  # only where a lake exists (parquet_writer.py: why)

    try:
        return pq.read_schema(summary).remove_metadata().equals(table_schema.remove_metadata())
    except (OSError, pa.ArrowException):
        return False


def write_parquet_tmp(table: pa.Table, final: Path, token: str,
                      group_by: str | None = None) -> Path:
    """Write ``table`` to a hidden temporary beside ``final``; return its path.

    ``group_by`` (a boolean column): its true rows first, then the others,
    never in one row group, so a reader filtering on it skips the other row
    groups by their statistics without decoding a value of them.
    """
    tmp = final.with_name(f".{final.name}.{token}{TMP_SUFFIX}")
    options = _write_options(table, grouped=group_by is not None)
    try:
        writer = ParquetWriter(tmp, table.schema, **options)
    except FileNotFoundError:
        # The folder is new (a new run, a new lake): made only then, since every
        # file of a trace asking for its folder first cost a syscall per table.
        final.parent.mkdir(parents=True, exist_ok=True)
        writer = ParquetWriter(tmp, table.schema, **options)
    with writer:
        if group_by is None:
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            return tmp
        for rows in _row_groups(table, group_by):
            # One row group's copy at a time, dropped once written: the most ever
            # held beside the table (the whole table unsplit: sliced, not copied).
            if rows is None:
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            else:
                writer.write_table(table.take(arrow_array(rows)),
                                   row_group_size=GROUPED_ROW_GROUP_ROWS)
    return tmp


#: Rows per row group of a table written whole.
ROW_GROUP_ROWS = 256 * 1024
#: Rows per row group of a table written in ``group_by`` order (slices): each group is
#: copied before it is written, so this bounds the copy. Measured on the 52.7 MB
#: merged trace's slices (189 k rows, 190 MiB before the write): 256 Ki rows (the
#: whole parts) peaked at +50 MiB, 64 Ki at +33, 32 Ki at +8, at the same CPU
#: (0.17 s) and 2 % more bytes on disk.
GROUPED_ROW_GROUP_ROWS = 32 * 1024

#: Tables with fewer rows are written uncompressed and plain (see _write_options).
COMPRESS_FROM_ROWS = 1024


def _write_options(table: pa.Table, grouped: bool = False) -> dict[str, object]:
    """zstd and the encodings of :func:`_encoding_options` for tables of
    :data:`COMPRESS_FROM_ROWS` rows or more; below, plain and uncompressed, without
    statistics (kept for a ``grouped`` table: readers skip its row groups by them).

    Why: a trace writes seven files, six of them a few rows (its ``traces``
    row, threads, processes, groups, annotation ranges, often its flows), and a
    fresh lake twelve empty ones; zstd's per-column setup was most of their cost
    (on a dlrm_8rank trace, uncompressed, those six took 2.9 ms of CPU instead of
    5.1 ms for a few kB more on disk), and dictionaries and min/max statistics
    most of the rest (on a 1.8 MB trace's six, 3.7 → 2.6 ms). A reader skips
    nothing by the statistics of a file of a few rows. None of these changes a
    value read back.
    """
    if table.num_rows >= COMPRESS_FROM_ROWS:
        return {"compression": "zstd", **_encoding_options(table.schema)}
    if grouped:
        return {"compression": "none", **_encoding_options(table.schema)}
    return {"compression": "none", "use_dictionary": False, "write_statistics": False}


def _row_groups(table: pa.Table, flag: str) -> list[np.ndarray | None]:
    """The rows of each row group of ``table`` written in ``flag`` order: where it
    holds, then the others (NULL counts as false), at most
    :data:`GROUPED_ROW_GROUP_ROWS` a group and never mixed; [None] (the whole
    table, uncopied) for a table whose rows all fall in one part, or that has
    none (it still writes its schema).

    Takes of row numbers rather than two filters of the whole table: a filter
    copies a whole part at once (most of the table), a take one group; on a
    single-chunk Kineto table both cost the same CPU. (On a 1.1 M-row Nsight
    GPU in 64 Ki-row chunks the filters were faster, but Nsight writes its
    slices itself, ingest/nsys/write.py.)
    """
    chosen = pc.fill_null(table[flag], False).to_numpy(zero_copy_only=False).astype(bool)
    parts = [np.flatnonzero(chosen), np.flatnonzero(~chosen)]
    if min(part.size for part in parts) == 0:
        return [None]
    step = GROUPED_ROW_GROUP_ROWS
    return [part[at:at + step] for part in parts for at in range(0, part.size, step)]


def _encoding_options(table_schema: pa.Schema) -> dict[str, object]:
    """Dictionary-encode the repetitive string columns only, delta-encode the integer
    columns, and skip min/max statistics on ``args`` (long JSON text no reader
    filters on).

    Measured on the A100 trace's slices: 0.015 → 0.012 s to write, 663 → 452 kB
    on disk; a dictionary over near-unique values (times, ids, args) is pure cost.
    Integers (times, ids, depths: sorted or small steps) as ``DELTA_BINARY_PACKED``
    rather than plain, on the same trace's 27 k slices: four int64 columns 3.3 →
    1.5 ms to write with zstd, 185 → 139 kB; the whole slices file 32 → 24 ms
    (benchmarks/README.md, "small rows' fixed cost"). A Parquet 2 encoding that
    DuckDB and Spark (3.3+) read; the values read back are the same.
    """
    strings = [f.name for f in table_schema
               if pa.types.is_string(f.type) and f.name not in _HIGH_CARDINALITY]
    stats = [f.name for f in table_schema if f.name not in _HIGH_CARDINALITY]
    integers = {f.name: "DELTA_BINARY_PACKED" for f in table_schema
                if pa.types.is_integer(f.type)}
    return {"use_dictionary": strings, "write_statistics": stats,
            "column_encoding": integers}


#: Columns whose values are (nearly) all different: no dictionary, no statistics.
_HIGH_CARDINALITY = frozenset({"args", "distributed_info", "device_properties"})


#: Per trace table, the boolean column its rows are grouped by (write_parquet_tmp).
ROW_GROUP_FLAGS = {"slices": "has_role"}


def trace_file(warehouse: Warehouse, table: str, run_id: str, trace_id: str) -> Path:
    return warehouse.partition_dir(table, run_id) / f"{trace_id}.parquet"


def write_trace_tmp(
    warehouse: Warehouse, run_id: str, trace_id: str, tables: dict[str, pa.Table], token: str
) -> list[tuple[Path, Path]]:
    """Write every table of one trace to temporaries; return (tmp, final) in commit order.

    ``tables`` are the parser's (``slices`` with :data:`~.schema.PARSED_SLICES`);
    the lake's ``slices`` gains the slice context here (ingest/slice_context.py)
    and ``annotation_ranges`` is derived from them (ingest/annotation_context.py).
    """
    slices = with_context(tables["slices"], tables["flows"], tables["threads"])
    tables = {**tables, "slices": slices, "annotation_ranges": annotation_ranges(slices)}
    pending = []
    try:
        for table in TRACE_TABLES:
            final = trace_file(warehouse, table, run_id, trace_id)
            group_by = ROW_GROUP_FLAGS.get(table)
            pending.append((write_parquet_tmp(tables[table], final, token, group_by), final))
    except BaseException:
        discard(pending)
        raise
    return pending


def commit(pending: Iterable[tuple[Path, Path]]) -> None:
    """Rename temporaries into place, in order (``traces`` last)."""
    for tmp, final in pending:
        os.replace(tmp, final)


def discard(pending: Iterable[tuple[Path, Path]]) -> None:
    for tmp, _final in pending:
        tmp.unlink(missing_ok=True)


def remove_trace(warehouse: Warehouse, run_id: str, trace_id: str) -> None:
    """Unload a trace: the commit marker first, so readers never see half of it."""
    for table in reversed(TRACE_TABLES):
        trace_file(warehouse, table, run_id, trace_id).unlink(missing_ok=True)


@dataclass(frozen=True)
class ManifestEntry:
    """What the lake knows of one loaded file."""

    run_id: str
    path: str
    trace_id: str
    rank: int
    iteration: int | None
    min_step: int | None
    max_step: int | None
    size_bytes: int
    mtime_ns: int
    content_hash: str
    world_size: int | None = None
    #: traces.lake_format: None for a trace written before format 2.
    lake_format: int | None = LAKE_FORMAT

    @property
    def is_current(self) -> bool:
        """Written in this ingest's lake format (else the trace must be parsed again)."""
        return self.lake_format == LAKE_FORMAT


_MANIFEST_COLUMNS = ("run_id", "path", "trace_id", "rank", "iteration", "min_profiler_step",
                     "max_profiler_step", "size_bytes", "mtime_ns", "content_hash", "world_size",
                     "lake_format")


def read_manifest(warehouse: Warehouse) -> list[ManifestEntry]:
    """Every loaded trace, read from the ``traces`` dataset (the commit markers).

    Read with pyarrow, file by file, not DuckDB: ingest processes then never
    import DuckDB (~40 MB of RSS and ~0.15 s each, shared by forked workers).
    A column that an older lake lacks reads as NULL.
    """
    entries: list[ManifestEntry] = []
    markers = sorted(warehouse.table_dir("traces").glob("run=*/*.parquet"))
    if markers:
        import pyarrow.parquet as pq  # only where a lake holds traces (parquet_writer.py)
    for marker in markers:
        handle = pq.ParquetFile(marker)
        present = [c for c in _MANIFEST_COLUMNS if c in handle.schema_arrow.names]
        table = handle.read(columns=present)
        columns = [table[c].to_pylist() if c in present else [None] * table.num_rows
                   for c in _MANIFEST_COLUMNS]
        entries.extend(ManifestEntry(*row) for row in zip(*columns))
    return entries


def recover(warehouse: Warehouse, older_than_s: float | None = None,
            before_removing_data: Callable[[], None] | None = None) -> list[Path]:
    """Delete temporaries and files of traces without a commit marker; return them.

    ``older_than_s``: touch only files last modified longer ago than that
    (a sharded ingest, :mod:`ingest.shard`, must leave other writers'
    in-flight files alone); None removes every leftover (the one writer
    holds the warehouse lock). ``before_removing_data``: called once before
    the first data file goes (ingest takes the build lock there: a running
    build's staging views may be reading it); hidden temporaries are never
    read by a build.
    """
    removed: list[Path] = []
    if not warehouse.lake.exists():
        return removed
    now = time.time()

    def stale(path: Path) -> bool:
        if older_than_s is None:
            return True
        try:
            return now - path.stat().st_mtime > older_than_s
        except FileNotFoundError:
            return False

    for tmp in warehouse.lake.rglob(f".*{TMP_SUFFIX}"):
        if stale(tmp):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    committed: set[tuple[str, str]] = set()
    traces_dir = warehouse.table_dir("traces")
    for marker in traces_dir.glob("run=*/*.parquet"):
        committed.add((marker.parent.name, marker.stem))
    for table in TRACE_TABLES:
        if table == "traces":
            continue
        for data in warehouse.table_dir(table).glob("run=*/*.parquet"):
            if (data.parent.name, data.stem) not in committed and stale(data):
                if before_removing_data is not None:
                    before_removing_data()
                    before_removing_data = None
                data.unlink(missing_ok=True)
                removed.append(data)
    return removed


def error_file_name(path: str) -> str:
    """The name of the error record of ``path`` (the same in every run's folder)."""
    key = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()
    return f"{key}.parquet"


def error_file(warehouse: Warehouse, run_id: str, path: str) -> Path:
    return warehouse.partition_dir("ingest_errors", run_id) / error_file_name(path)


def error_files(warehouse: Warehouse) -> dict[str, list[Path]]:
    """Every error record in the lake, by file name (:func:`error_file_name`): one
    listing, so clearing a path's records in every run costs no search per file."""
    found: dict[str, list[Path]] = {}
    for record in warehouse.table_dir("ingest_errors").glob("run=*/*.parquet"):
        found.setdefault(record.name, []).append(record)
    return found


def record_error(warehouse: Warehouse, run_id: str, row: dict[str, object], token: str) -> Path:
    """Replace the error record of one path (the latest failure is what matters); return it."""
    table = pa.Table.from_pylist([row], schema=LAKE_TABLES["ingest_errors"])
    final = error_file(warehouse, run_id, str(row["path"]))
    os.replace(write_parquet_tmp(table, final, token), final)
    return final
