"""Load one Nsight Systems file for the ingest runner: hash, export if needed, parse.

Kept apart from :mod:`ingest.runner` so the runner only learns that an
export yields one trace per GPU; everything Nsight-specific is here and in
:mod:`ingest.nsys.parse`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ..trace_types import ParsedTrace, TraceError, TraceFile
from .parse import parse_nsys
from .read import exported_sqlite

_CHUNK = 1 << 20


def file_hash(path: Path) -> str:
    """blake2b-128 of the file's bytes, read in 1 MiB chunks (exports can be GBs)."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise TraceError("unreadable", f"cannot read the file: {exc.strerror}",
                         "check the path and its permissions") from exc
    return digest.hexdigest()


def load_nsys_file(source: TraceFile, known_hash: str | None,
                   trace_id_for: Callable[[str, str], str]
                   ) -> tuple[str, Iterator[ParsedTrace] | None]:
    """The file's content hash and its traces, one per GPU in rank order.

    Returns ``(hash, None)`` when the content equals ``known_hash`` (already
    loaded). The traces come from a generator: write each before taking the
    next, so only one GPU's rows are held. Trace ids are derived from the
    run, the content and the GPU's index, so reloading the same bytes is
    idempotent.
    """
    content_hash = file_hash(source.path)
    if known_hash == content_hash:
        return content_hash, None
    return content_hash, _traces(source, content_hash, trace_id_for)


def _traces(source: TraceFile, content_hash: str,
            trace_id_for: Callable[[str, str], str]) -> Iterator[ParsedTrace]:
    ingested_at = dt.datetime.now(dt.timezone.utc)
    with exported_sqlite(source.path) as sqlite_path:
        yield from parse_nsys(
            sqlite_path, source, content_hash=content_hash,
            id_for=lambda index: trace_id_for(source.run_id, f"{content_hash}/gpu{index}"),
            ingested_at=ingested_at)
