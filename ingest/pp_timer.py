"""PP-timer logs (``event_times_PP*.json``) → the ``pp_timer_events`` lake table.

The files come from the Megatron patch's PP timer
(``megatron_patch/pp_timer.py``), from the seed's original Megatron-LM commit
(same keys, no metadata) and from ``tracehouse simulate``. One file is one
rank's view of one iteration:

* the name gives the layout and the rank:
  ``event_times_PP{pp}_VPP{vpp}_TPxCPxDP_rank_{r}_pp_rank_{p}_rank_{global}.json``;
* keys ``forward-{mb}-start|end`` / ``backward-{mb}-start|end`` (VPP 1) or
  ``forward-{chunk}-{mb}-start|end`` (VPP > 1) hold float milliseconds after
  the rank's post-barrier start mark; ``total-execution-time`` likewise;
* our files add a ``"tracehouse"`` object (iteration, rank, sizes, clock);
  it must agree with the name. The original's files have none: iteration is
  then NULL.

Every file becomes one row per (vpp_chunk, microbatch, phase), written
atomically as ``pp_timer_events/run=<run>/<file_id>.parquet`` (one rename,
so a file is loaded whole or not at all). A file that does not parse raises
:class:`~ingest.trace_types.TraceError` naming the problem; nothing is written.
Reloading is incremental like traces: the rows carry the file's path, size,
mtime and content hash, and :func:`read_pp_timer_manifest` gives them back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracehouse.core.warehouse import Warehouse

from .schema import PP_TIMER_EVENTS
from .side_files import ManifestEntry, land_rows, read_manifest, read_text
from .side_files import file_id_for as side_file_id
from .trace_types import TraceError

__all__ = [
    "PP_TIMER_NAME",
    "PPTimerManifestEntry",
    "is_pp_timer_name",
    "load_pp_timer_file",
    "parse_pp_timer",
    "read_pp_timer_manifest",
]

PP_TIMER_NAME = re.compile(
    r"^event_times_PP(?P<pp>\d+)_VPP(?P<vpp>\d+)_TPxCPxDP_rank_(?P<r>\d+)"
    r"_pp_rank_(?P<p>\d+)_rank_(?P<rank>\d+)\.json$")
_KEY = re.compile(r"^(?P<phase>forward|backward)-(?P<a>\d+)(?:-(?P<b>\d+))?-(?P<edge>start|end)$")
TOTAL_KEY = "total-execution-time"
META_KEY = "tracehouse"
_HINT = ("expected the PP timer's format: {\"forward-0-start\": 0.2, \"forward-0-end\": 35.8, "
         "..., \"total-execution-time\": 640.1} (ms), keys forward-{chunk}-{mb}-... with VPP > 1")


def is_pp_timer_name(name: str) -> bool:
    """True for the file names ingest loads into ``pp_timer_events``."""
    return bool(PP_TIMER_NAME.match(name))


def _bad(message: str, hint: str = _HINT) -> TraceError:
    return TraceError("invalid_pp_timer", message, hint)


def _ms_to_ns(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(f"{key!r} is {value!r}, not a number of milliseconds")
    if value < 0:
        raise _bad(f"{key!r} is {value} ms, before the timer's start")
    return round(value * 1_000_000)


def _meta_int(meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"tracehouse.{key} is {value!r}, not a non-negative integer")
    return value


def parse_pp_timer(text: str, name: str) -> list[dict[str, Any]]:
    """Rows (without file columns) of one PP-timer file; raises TraceError when it is bad."""
    match = PP_TIMER_NAME.match(name)
    if match is None:
        raise _bad(f"file name {name!r} is not event_times_PP{{pp}}_VPP{{vpp}}_TPxCPxDP_rank_"
                   "{r}_pp_rank_{p}_rank_{global}.json", "rename it as the PP timer wrote it")
    pp_size, vpp_size = int(match["pp"]), int(match["vpp"])
    pp_rank, tp_cp_dp_rank, rank = int(match["p"]), int(match["r"]), int(match["rank"])
    if pp_size < 1 or vpp_size < 1 or pp_rank >= pp_size:
        raise _bad(f"file name says pp_rank {pp_rank} of PP {pp_size}, VPP {vpp_size}",
                   "the name must hold PP >= 1, VPP >= 1 and pp_rank < PP")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if not isinstance(doc, dict):
        raise _bad("not a JSON object of event times")
    iteration = None
    meta = doc.get(META_KEY)
    if meta is not None:
        if not isinstance(meta, dict):
            raise _bad(f"{META_KEY!r} is not an object")
        iteration = _meta_int(meta, "iteration")
        for key, expected in (("rank", rank), ("pp_rank", pp_rank), ("pp_size", pp_size),
                              ("vpp_size", vpp_size), ("tp_cp_dp_rank", tp_cp_dp_rank)):
            said = _meta_int(meta, key)
            if said is not None and said != expected:
                raise _bad(f"tracehouse.{key} is {said} but the file name says {expected}",
                           "the file was renamed or edited; write it again")
    marks: dict[tuple[int, int, str], dict[str, int]] = {}
    for key, value in doc.items():
        found = _KEY.match(key)
        if found is None:
            continue  # total-execution-time, metadata, keys of a newer writer
        if vpp_size > 1 and found["b"] is None:
            raise _bad(f"key {key!r} has no model chunk, but the file name says VPP {vpp_size}")
        if vpp_size == 1 and found["b"] is not None:
            raise _bad(f"key {key!r} names a model chunk, but the file name says VPP 1")
        chunk, microbatch = ((int(found["a"]), int(found["b"])) if found["b"] is not None
                             else (0, int(found["a"])))
        if chunk >= vpp_size:
            raise _bad(f"key {key!r}: model chunk {chunk} but VPP is {vpp_size}")
        marks.setdefault((chunk, microbatch, found["phase"]), {})[found["edge"]] = _ms_to_ns(
            value, key)
    if not marks:
        raise _bad("no forward-/backward- event times in the file")
    total = doc.get(TOTAL_KEY)
    total_ns = None if total is None else _ms_to_ns(total, TOTAL_KEY)
    rows = []
    for (chunk, microbatch, phase), edges in sorted(marks.items()):
        if set(edges) != {"start", "end"}:
            missing = ({"start", "end"} - set(edges)).pop()
            raise _bad(f"{phase} of chunk {chunk} microbatch {microbatch} has no {missing!r} "
                       "time", "the timer was interrupted; time the iteration again")
        if edges["end"] < edges["start"]:
            raise _bad(f"{phase} of chunk {chunk} microbatch {microbatch} ends before it starts")
        rows.append({
            "rank": rank, "pp_rank": pp_rank, "pp_size": pp_size, "vpp_size": vpp_size,
            "tp_cp_dp_rank": tp_cp_dp_rank, "iteration": iteration, "vpp_chunk": chunk,
            "microbatch": microbatch, "phase": phase, "start_ns": edges["start"],
            "end_ns": edges["end"], "dur_ns": edges["end"] - edges["start"],
            "total_execution_ns": total_ns,
            "clock": meta.get("clock") if isinstance(meta, dict) else None,
            "timer_format": "tracehouse" if meta is not None else "original",
        })
    return rows


#: What the lake knows of one loaded PP-timer file.
PPTimerManifestEntry = ManifestEntry


def file_id_for(run_id: str, path: str) -> str:
    """Identifier of one PP-timer file in one run (a reload replaces its rows)."""
    return side_file_id("pp_timer", run_id, path)


def read_pp_timer_manifest(warehouse: Warehouse) -> dict[tuple[str, str], PPTimerManifestEntry]:
    """Every loaded PP-timer file, keyed by (run, path), read back from the lake table."""
    return read_manifest(warehouse, "pp_timer_events")


def load_pp_timer_file(warehouse: Warehouse, run_id: str, path: Path, token: str,
                       known: PPTimerManifestEntry | None = None, *,
                       before_commit: Callable[[], None] | None = None) -> int | None:
    """Parse one PP-timer file and land its rows atomically (``before_commit`` runs
    just before they are renamed into place).

    Returns the row count, or None when ``known`` shows the same content is
    already loaded. Raises :class:`TraceError` when the file cannot be read
    or parsed; nothing is written then (a previously loaded version stays).
    """
    read = read_text(path, known, _bad, "the file is damaged; copy it again",
                     "the timer's write was cut short; time the iteration again")
    if read is None:
        return None
    text, stat, content_hash = read
    rows = parse_pp_timer(text, path.name)
    return land_rows(warehouse, "pp_timer_events", PP_TIMER_EVENTS, "pp_timer", run_id, path,
                     rows, token, stat, content_hash, before_commit=before_commit)
