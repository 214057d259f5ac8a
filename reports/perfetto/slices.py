"""What a merged timeline is made of: ranks, slices, the writer interface, the result.

The vocabulary shared by :mod:`.queries` (mart rows → :class:`Slice`),
:mod:`.layout` (slices → nesting tracks) and the writers
(:mod:`.proto_writer`, :mod:`.json_writer`), so that none of them imports
another's internals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: pid of rank r is PID_BASE + r: Perfetto treats pid 0 as the idle task.
PID_BASE = 100_000
#: Thread ids of rank r's tracks are (PID_BASE + r) * TIDS_PER_RANK + k, unique in the file.
TIDS_PER_RANK = 1_000

#: Packets buffered before one write to the file.
BATCH_PACKETS = 4_096


class ExportError(Exception):
    """The export cannot run: no database, unknown run or ranks, empty selection, bad format."""


@dataclass
class ExportResult:
    """What :func:`~tracehouse.reports.perfetto.export.export_perfetto` wrote."""

    path: Path
    fmt: str
    run_id: str
    ranks: tuple[int, ...]
    kernel_slices: int = 0
    cpu_step_slices: int = 0
    cpu_collective_slices: int = 0
    flows: int = 0
    tracks: int = 0
    overlap_tracks: int = 0
    offsets_applied: bool = False
    cpu_steps_source: str | None = None
    origin_ns: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    process_names: dict[int, str] = field(default_factory=dict)

    @property
    def slices(self) -> int:
        """Kernel slices plus CPU step and CPU collective slices."""
        return self.kernel_slices + self.cpu_step_slices + self.cpu_collective_slices

    def summary(self) -> str:
        """One line for the command line: what went into the file."""
        ranks = len(self.ranks)
        offsets = ", clock offsets applied" if self.offsets_applied else ""
        collectives = (f", {self.cpu_collective_slices:,} CPU collective calls"
                       if self.cpu_collective_slices else "")
        flows = f", {self.flows:,} collective flows" if self.flows else ""
        return (f"{ranks} rank{'s' if ranks != 1 else ''}, {self.kernel_slices:,} kernel "
                f"slices and {self.cpu_step_slices:,} CPU steps{collectives} on "
                f"{self.tracks:,} tracks{flows} "
                f"({self.bytes_written / 1e6:.1f} MB {self.fmt}{offsets})")


@dataclass(frozen=True)
class Rank:
    rank: int
    name: str

    @property
    def pid(self) -> int:
        return PID_BASE + self.rank


@dataclass
class Slice:
    """One slice; ``static`` args repeat across many slices (cached), ``dynamic`` ones do not."""

    start: int
    end: int
    name: str
    category: str
    colour: str
    static: tuple[tuple[str, Any], ...]
    dynamic: tuple[tuple[str, Any], ...]
    #: (flow id, order, members) when the slice is a member of a matched collective.
    flow: tuple[int, int, int] | None = None


_UNENCODABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(value: Any) -> str:
    """Trace-derived text made safe for protobuf and JSON: valid UTF-8, no NUL.

    DuckDB strings are valid UTF-8, but a Python ``str`` can still hold lone
    surrogates (and NUL bytes break C-string readers): both become U+FFFD.
    """
    text = value if isinstance(value, str) else str(value)
    return _UNENCODABLE.sub("\ufffd", text)


class Sink:
    """Where tracks and slices go; one subclass per format."""

    def process(self, rank: Rank) -> None:
        raise NotImplementedError

    def thread(self, rank: Rank, tid: int, label: str) -> None:
        raise NotImplementedError

    def begin(self, tid: int, item: Slice) -> None:
        raise NotImplementedError

    def end(self, tid: int, ts: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
