"""Load one Nsight Systems file for the ingest runner: hash, export if needed, parse and
write each GPU in a child process.

Kept apart from :mod:`ingest.runner` so the runner only learns that an
export yields one trace per GPU; everything Nsight-specific is here and in
:mod:`ingest.nsys.parse`.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..trace_types import TraceError, TraceFile
from .child import run_in_child
from .parse import ExportPlan, plan_export
from .read import NsysDatabase, exported_sqlite
from .write import NsysGpu

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


#: Streams one GPU into lake temporaries: ``(tmp, final)`` paths in commit order.
WriteGpu = Callable[[NsysGpu], list[tuple[Path, Path]]]


@dataclass(frozen=True)
class WrittenGpu:
    """One GPU of an export, written to lake temporaries by a child process: what the
    runner reports and commits (the rows themselves went with the child)."""

    trace_id: str
    rank: int
    iteration: int | None
    profiler_steps: tuple[int, ...]
    slices: int
    flows: int
    pending: list[tuple[Path, Path]]


def load_nsys_file(source: TraceFile, known_hash: str | None,
                   trace_id_for: Callable[[str, str], str], write: WriteGpu
                   ) -> tuple[str, Iterator[WrittenGpu] | None]:
    """The file's content hash and its GPUs, each written by ``write``, in rank order.

    Returns ``(hash, None)`` when the content equals ``known_hash`` (already
    loaded). The GPUs come from a generator: each is read, mapped and
    written in a forked child process (:mod:`.child`) when its turn comes,
    so memory holds one GPU's rows at a time and all of it goes back to the
    system when the GPU is written. Trace ids are derived from the run, the
    content and the GPU's index, so reloading the same bytes is idempotent.
    """
    content_hash = file_hash(source.path)
    if known_hash == content_hash:
        return content_hash, None
    return content_hash, _gpus(source, content_hash, trace_id_for, write)


def _gpus(source: TraceFile, content_hash: str, trace_id_for: Callable[[str, str], str],
          write: WriteGpu) -> Iterator[WrittenGpu]:
    ingested_at = dt.datetime.now(dt.timezone.utc)
    with exported_sqlite(source.path) as sqlite_path:
        with NsysDatabase(sqlite_path) as db:
            plan = plan_export(db, source)
        for index in range(len(plan.devices)):
            trace_id = trace_id_for(source.run_id, f"{content_hash}/gpu{index}")
            yield run_in_child(functools.partial(
                _write_gpu, sqlite_path, plan, index, source, write, trace_id=trace_id,
                content_hash=content_hash, ingested_at=ingested_at))


def _write_gpu(sqlite_path: Path, plan: ExportPlan, index: int, source: TraceFile,
               write: WriteGpu, *, trace_id: str, content_hash: str,
               ingested_at: object) -> WrittenGpu:
    """In the child: stream the ``index``-th GPU into the lake (its own connection: a
    SQLite connection must not cross a fork)."""
    with NsysDatabase(sqlite_path) as db:
        part = NsysGpu(db=db, plan=plan, index=index, source=source, trace_id=trace_id,
                       content_hash=content_hash, ingested_at=ingested_at)
        pending = write(part)
    return WrittenGpu(trace_id=part.trace_id, rank=part.rank, iteration=source.iteration_hint,
                      profiler_steps=part.profiler_steps, slices=part.slices,
                      flows=part.flows, pending=pending)
