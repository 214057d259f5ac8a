"""Value types passed between discovery, the parsers and the lake writer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa


@dataclass(frozen=True)
class TraceFile:
    """A trace file found by discovery, with what its path and stat tell us.

    ``rank_hint`` and ``iteration_hint`` come from the file and folder names;
    the parser prefers what the trace itself says (``distributedInfo.rank``).
    """

    path: Path
    run_id: str
    layout: str  # megatron_traceviz | tensorboard | hta | generic
    rank_hint: int | None
    iteration_hint: int | None
    size_bytes: int
    mtime_ns: int


@dataclass
class ParsedTrace:
    """One trace file turned into lake rows (one Arrow table per lake table).

    ``tables`` has the keys of :data:`ingest.schema.TRACE_TABLES` but
    ``annotation_ranges`` (the lake writer derives it), each table conforming
    to its schema (``slices`` to PARSED_SLICES, before its context).
    """

    trace_id: str
    rank: int
    iteration: int | None
    profiler_steps: tuple[int, ...]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    #: ``distributedInfo.world_size`` (None when the trace does not say).
    world_size: int | None = None
    #: Where the rank came from: ``distributedInfo``, ``file name``, or
    #: ``single_process`` (no rank anywhere and no distributed world: rank 0
    #: of a one-rank run, valid only while the trace is alone in its run).
    rank_source: str = "distributedInfo"


class TraceError(Exception):
    """A file that cannot be loaded: what is wrong and how to fix it.

    ``kind`` is a short machine-readable tag (``truncated``, ``invalid_json``,
    ``not_kineto``, ``invalid_utf8``, ``number_out_of_range``, ``no_rank``,
    ``duplicate_rank``, ``mixed_jobs``, ``invalid_gzip``, ``empty``, ``unreadable``...),
    ``message`` names the problem, ``hint`` suggests the fix. The path is added by the caller.
    """

    def __init__(self, kind: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint


def display_path(path: object) -> str:
    """A path as valid UTF-8 text, even when the file name is not (shown with U+FFFD)."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
