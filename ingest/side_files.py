"""Small per-file lake tables beside traces (PP-timer logs, comm logs): read, identify, land.

Why one module: both kinds are loaded the same way -- read the whole file,
hash it, skip it when the lake already holds that content, decode UTF-8,
parse (kind-specific), then land every row in one Parquet file renamed into
place (``<table>/run=<run>/<file_id>.parquet``), so a file is loaded whole or
not at all and a reload replaces it. The rows carry the file's path, size,
mtime and content hash; :func:`read_manifest` reads them back for
incremental reloads.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracehouse.core.warehouse import Warehouse

from . import lake
from .trace_types import TraceError, display_path

__all__ = ["ManifestEntry", "file_id_for", "land_rows", "read_manifest", "read_text"]


def file_id_for(kind: str, run_id: str, path: str) -> str:
    """Identifier of one side file in one run (a reload replaces its rows)."""
    return hashlib.blake2b(f"{kind}\0{run_id}\0{path}".encode("utf-8", "surrogateescape"),
                           digest_size=8).hexdigest()


@dataclass(frozen=True)
class ManifestEntry:
    """What the lake knows of one loaded side file."""

    run_id: str
    path: str
    size_bytes: int
    mtime_ns: int
    content_hash: str


def read_manifest(warehouse: Warehouse, table: str) -> dict[tuple[str, str], ManifestEntry]:
    """Every loaded file of ``table``, keyed by (run, path), read back from the lake."""
    import duckdb  # only here: ingest workers never need it (see lake.read_manifest)

    glob = str(warehouse.table_dir(table) / "**" / "*.parquet")
    with duckdb.connect() as con:
        rows = con.execute(
            "select distinct run_id, path, size_bytes, mtime_ns, content_hash "
            "from read_parquet(?, union_by_name = true, hive_partitioning = false)",
            [glob],
        ).fetchall()
    return {(row[0], row[1]): ManifestEntry(*row) for row in rows}


def read_text(path: Path, known: ManifestEntry | None, bad: Callable[[str, str], TraceError],
              damaged_hint: str, empty_hint: str) -> tuple[str, os.stat_result, str] | None:
    """(text, stat, content hash) of ``path``; None when ``known`` holds the same content.

    Raises :class:`TraceError` for an unreadable, non-UTF-8 or empty file.
    """
    try:
        raw = path.read_bytes()
        stat = path.stat()
    except OSError as exc:
        raise TraceError("unreadable", f"cannot read the file: {exc.strerror}",
                         "check the path and its permissions") from exc
    content_hash = hashlib.blake2b(raw, digest_size=16).hexdigest()
    if known is not None and known.content_hash == content_hash:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 text (byte {exc.start})", damaged_hint) from exc
    if not text.strip():
        raise TraceError("empty", "the file is empty", empty_hint)
    return text, stat, content_hash


def land_rows(warehouse: Warehouse, table: str, schema: pa.Schema, kind: str, run_id: str,
              path: Path, rows: list[dict[str, Any]], token: str, stat: os.stat_result,
              content_hash: str, extra: dict[str, Any] | None = None,
              before_commit: Callable[[], None] | None = None) -> int:
    """Write ``rows`` (plus the file columns) as one file of ``table``, renamed into place
    (``before_commit`` runs just before the rename)."""
    shown = display_path(path)
    file_id = file_id_for(kind, run_id, shown)
    common = dict(extra or {}) | {
        "run_id": run_id, "trace_id": file_id, "path": shown, "content_hash": content_hash,
        "size_bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns,
        "ingested_at": dt.datetime.now(dt.timezone.utc)}
    for row in rows:
        row.update(common)
    arrow = pa.Table.from_pylist(rows, schema=schema)
    final = warehouse.partition_dir(table, run_id) / f"{file_id}.parquet"
    tmp = lake.write_parquet_tmp(arrow, final, token)
    if before_commit is not None:
        before_commit()
    os.replace(tmp, final)
    return arrow.num_rows
