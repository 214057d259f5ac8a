"""The PP-timer log format: file names, event keys and the one writer of the files.

Why here, in the core: ``megatron_patch/pp_timer.py`` writes these files
from a training job and ``tracehouse simulate`` writes the same format for
simulated runs; ingest reads them (``ingest/pp_timer.py``). Dependencies
point one way: the patch imports the core, never the reverse.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FORMAT",
    "META_KEY",
    "TOTAL_KEY",
    "RankInfo",
    "event_key",
    "event_times_filename",
    "write_event_times",
]

#: Value of ``tracehouse.format`` in the files this module writes.
FORMAT = "tracehouse-pp-timer/1"
#: The one key of our metadata object (ignored by the original plot.py).
META_KEY = "tracehouse"
TOTAL_KEY = "total-execution-time"


@dataclass(frozen=True)
class RankInfo:
    """Where this rank sits: what the file name and the metadata need."""

    global_rank: int
    pp_rank: int
    pp_size: int
    vpp_size: int
    tp_cp_dp_rank: int
    world_size: int | None = None


def event_times_filename(info: RankInfo) -> str:
    """The original's file name (its ``plot.py`` filters on exactly this pattern)."""
    return (f"event_times_PP{info.pp_size}_VPP{info.vpp_size}_TPxCPxDP_rank_"
            f"{info.tp_cp_dp_rank}_pp_rank_{info.pp_rank}_rank_{info.global_rank}.json")


def event_key(phase: str, chunk: int | None, microbatch: int, edge: str) -> str:
    """``forward-3-start`` (no VPP) or ``forward-1-3-start`` (chunk 1, VPP)."""
    if chunk is None:
        return f"{phase}-{microbatch}-{edge}"
    return f"{phase}-{chunk}-{microbatch}-{edge}"


def write_event_times(log_dir: Path | str, info: RankInfo, events: list[tuple[str, float]],
                      total_ms: float, *, iteration: int | None, clock: str,
                      microbatches: int) -> Path:
    """Write one rank's PP-timer file (atomically); the one writer of the format.

    Shared by the timer and by ``tracehouse simulate``, so simulated logs are
    byte-for-byte the same format as measured ones. ``events`` are
    (key, ms after the start mark) in the order they were taken.
    """
    doc: dict[str, Any] = {key: round(float(ms), 6) for key, ms in events}
    doc[TOTAL_KEY] = round(float(total_ms), 6)
    doc[META_KEY] = {
        "format": FORMAT,
        "iteration": iteration,
        "rank": info.global_rank,
        "pp_rank": info.pp_rank,
        "pp_size": info.pp_size,
        "vpp_size": info.vpp_size,
        "tp_cp_dp_rank": info.tp_cp_dp_rank,
        "world_size": info.world_size,
        "microbatches": microbatches,
        "clock": clock,
        "unit": "ms",
    }
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / event_times_filename(info)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, final)
    return final
