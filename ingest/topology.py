"""Topology files beside traces → the ``topology_groups`` lake table.

Two formats are read, both found by discovery in a run's folder:

* ``topology*.json``: the contract "Topology JSON" (ARCHITECTURE.md), written
  by tracehouse's Megatron patch, by ``tracehouse simulate`` and by
  ``tracehouse topology --out`` (which marks its output with
  ``"generator": "tracehouse topology"``; those rows get source
  ``generated``, the others ``topology_json``);
* ``unique_parallel_groups_*.txt``: Megatron-TraceViz's dump (TP, PP, DP
  and EP groups, full model replicas; sizes in ``X Size: N`` header lines),
  source ``traceviz_txt``.

Each file becomes one row per (kind, group) with the layout's sizes and
order repeated on every row, written atomically as
``topology_groups/run=<run>/<topology_id>.parquet``. A file that does not
parse raises :class:`~ingest.trace_types.TraceError` naming the problem; the
caller records it in ``ingest_errors`` and the traces still land.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracehouse.core.warehouse import Warehouse

from . import lake
from .schema import TOPOLOGY_GROUPS
from .side_files import ManifestEntry, read_manifest, read_text
from .trace_types import TraceError, display_path

__all__ = [
    "TOPOLOGY_JSON_NAME",
    "TRACEVIZ_TXT_NAME",
    "is_topology_name",
    "load_topology_file",
    "read_topology_manifest",
    "parse_topology_json",
    "parse_traceviz_txt",
    "topology_table",
]

TOPOLOGY_JSON_NAME = re.compile(r"^topology.*\.json$")
TRACEVIZ_TXT_NAME = re.compile(r"^unique_parallel_groups.*\.txt$")

_SIZE_KEYS = ("world", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp")
#: Section titles of the TraceViz text file → topology kind.
_TXT_SECTIONS = {
    "TENSOR PARALLEL": "tp",
    "PIPELINE PARALLEL": "pp",
    "DATA PARALLEL": "dp",
    "CONTEXT PARALLEL": "cp",
    "EXPERT PARALLEL": "ep",
    "FULL MODEL RANK GROUPS": "model_replica",
}
_TXT_SIZE = re.compile(r"^(TP|PP|CP|EP|ETP|VPP|DP|World) Size:\s*(\d+)\s*$")
_TXT_ORDER = re.compile(r"^Order:\s*([a-z-]+)\s*$")
_TXT_GROUP = re.compile(r"^(?:[A-Z]+ )?Group\s+\d+:\s*\[([^\]]*)\]\s*$")


def is_topology_name(name: str) -> bool:
    """True for the file names ingest loads into ``topology_groups``."""
    return bool(TOPOLOGY_JSON_NAME.match(name) or TRACEVIZ_TXT_NAME.match(name))


def _bad(message: str, hint: str) -> TraceError:
    return TraceError("invalid_topology", message, hint)


def _rank_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(
        isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**62 for r in value
    ):
        raise _bad(f"{where} is not a non-empty list of ranks (non-negative integers)",
                   "each group must be a JSON list of global ranks, e.g. [0, 1]")
    if len(set(value)) != len(value):
        raise _bad(f"{where} lists a rank twice", "each rank appears once in a group")
    return list(value)


def parse_topology_json(text: str) -> dict[str, Any]:
    """Validate contract topology JSON; return ``{"sizes", "order", "groups", "pgs", "source"}``.

    ``groups`` maps kind → list of rank lists; ``model_replica`` is taken
    from ``replicas`` when ``groups`` lacks it. ``pgs`` maps (kind, sorted
    ranks) → (pg_name, pg_desc) from ``process_groups`` when present.
    """
    hint = ("write it with `tracehouse topology ... --out FILE` or the Megatron patch; "
            "format: {\"sizes\": {...}, \"order\": \"tp-cp-ep-dp-pp\", \"groups\": "
            "{\"tp\": [[0, 1], ...], ...}}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                   hint) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
        raise _bad("not a topology file: no \"groups\" object", hint)
    sizes_in = doc.get("sizes", {})
    if not isinstance(sizes_in, dict):
        raise _bad("\"sizes\" is not an object", hint)
    sizes: dict[str, int | None] = {}
    for key in _SIZE_KEYS:
        value = sizes_in.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or not 0 < value < 2**62):
            raise _bad(f"sizes.{key} is {value!r}, not a positive integer", hint)
        sizes[key] = value
    order = doc.get("order")
    if order is not None and not isinstance(order, str):
        raise _bad("\"order\" is not a string", hint)
    groups: dict[str, list[list[int]]] = {}
    for kind, lists in doc["groups"].items():
        if not isinstance(lists, list):
            raise _bad(f"groups.{kind} is not a list of groups", hint)
        groups[str(kind)] = [_rank_list(g, f"groups.{kind}[{i}]") for i, g in enumerate(lists)]
    if "model_replica" not in groups and isinstance(doc.get("replicas"), list):
        groups["model_replica"] = [_rank_list(g, f"replicas[{i}]")
                                   for i, g in enumerate(doc["replicas"])]
    if not any(groups.values()):
        raise _bad("the topology lists no groups", hint)
    world = sizes["world"]
    if world is not None:
        for kind, lists in groups.items():
            for ranks in lists:
                if max(ranks) >= world:
                    raise _bad(f"groups.{kind} holds rank {max(ranks)}, but sizes.world is "
                               f"{world}", "fix the sizes or the groups")
    pgs: dict[tuple[str, tuple[int, ...]], tuple[str | None, str | None]] = {}
    process_groups = doc.get("process_groups")
    if isinstance(process_groups, dict):
        for kind, by_key in process_groups.items():
            if not isinstance(by_key, dict):
                continue
            for key, info in by_key.items():
                if not isinstance(info, dict):
                    continue
                try:
                    ranks = tuple(sorted(int(r) for r in str(key).split(",")))
                except ValueError:
                    continue
                name, desc = info.get("pg_name"), info.get("pg_desc")
                pgs[(str(kind), ranks)] = (None if name is None else str(name),
                                           None if desc is None else str(desc))
    source = "generated" if doc.get("generator") == "tracehouse topology" else "topology_json"
    return {"sizes": sizes, "order": order, "groups": groups, "pgs": pgs, "source": source}


def parse_traceviz_txt(text: str) -> dict[str, Any]:
    """Parse Megatron-TraceViz's ``unique_parallel_groups_*.txt``.

    Returns ``{"sizes", "order", "groups", "pgs", "source"}`` like
    :func:`parse_topology_json`. DP is not written by the original; it is
    derived as world / (tp * cp * pp) when those are known. Groups in
    sections this parser does not know (e.g. ``ERROR INFORMATION``) are
    ignored.
    """
    hint = ("expected Megatron-TraceViz's format: 'TP Size: N' lines and sections such as "
            "'TENSOR PARALLEL (TP) GROUPS' with 'Group N: [ranks]' lines")
    sizes: dict[str, int | None] = dict.fromkeys(_SIZE_KEYS)
    order = None
    groups: dict[str, list[list[int]]] = {}
    section: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        size = _TXT_SIZE.match(line)
        if size:
            sizes[size.group(1).lower()] = int(size.group(2))
            continue
        match = _TXT_ORDER.match(line)
        if match:
            order = match.group(1)
            continue
        title = next((kind for head, kind in _TXT_SECTIONS.items() if line.startswith(head)),
                     None)
        if title is not None:
            section = title
            continue
        if line.isupper() and line.endswith(("GROUPS", "INFORMATION", "STATISTICS")):
            section = None
            continue
        group = _TXT_GROUP.match(line)
        if group and section is not None:
            try:
                ranks = [int(r) for r in group.group(1).split(",")]
            except ValueError as exc:
                raise _bad(f"line {number}: {line!r} does not list integer ranks",
                           hint) from exc
            groups.setdefault(section, []).append(_rank_list(ranks, f"line {number}"))
    if not groups:
        raise _bad("no 'Group N: [ranks]' lines under a known section", hint)
    if sizes["dp"] is None and sizes["world"] and sizes["tp"] and sizes["pp"]:
        model = sizes["tp"] * sizes["pp"] * (sizes["cp"] or 1)
        if sizes["world"] % model == 0:
            sizes["dp"] = sizes["world"] // model
    return {"sizes": sizes, "order": order, "groups": groups, "pgs": {},
            "source": "traceviz_txt"}


def topology_id_for(run_id: str, path: str) -> str:
    """Identifier of one topology file in one run (a reload replaces its rows)."""
    return hashlib.blake2b(f"{run_id}\0{path}".encode("utf-8", "surrogateescape"),
                           digest_size=8).hexdigest()


def topology_table(parsed: dict[str, Any], run_id: str, path: str, content_hash: str,
                   size_bytes: int, mtime_ns: int, ingested_at: dt.datetime) -> pa.Table:
    """Rows of ``topology_groups`` for one parsed file (schema ``TOPOLOGY_GROUPS``)."""
    sizes = parsed["sizes"]
    topology_id = topology_id_for(run_id, path)
    rows = []
    for kind, lists in parsed["groups"].items():
        for index, ranks in enumerate(lists):
            pg_name, pg_desc = parsed["pgs"].get((kind, tuple(sorted(ranks))), (None, None))
            rows.append({
                "run_id": run_id, "topology_id": topology_id, "source": parsed["source"],
                "kind": kind, "group_index": index, "ranks": ranks, "group_size": len(ranks),
                "pg_name": pg_name, "pg_desc": pg_desc,
                **{("world_size" if key == "world" else f"{key}_size"): sizes[key]
                   for key in _SIZE_KEYS},
                "rank_order": parsed["order"], "path": path, "content_hash": content_hash,
                "size_bytes": size_bytes, "mtime_ns": mtime_ns, "ingested_at": ingested_at,
            })
    return pa.Table.from_pylist(rows, schema=TOPOLOGY_GROUPS)


def read_topology_manifest(warehouse: Warehouse) -> dict[tuple[str, str], ManifestEntry]:
    """Every loaded topology file, keyed by (run, path), read back from the lake table."""
    return read_manifest(warehouse, "topology_groups")


def load_topology_file(warehouse: Warehouse, run_id: str, path: Path, token: str,
                       known: ManifestEntry | None = None, *,
                       before_commit: Callable[[], None] | None = None) -> int | None:
    """Parse one topology file and land its rows atomically; return the row count.
    ``before_commit`` runs just before they are renamed into place.

    Returns None when ``known`` shows the same content is already loaded.
    Raises :class:`TraceError` when the file cannot be read or parsed; nothing
    is written then (a previously loaded version stays).
    """
    read = read_text(path, known, _bad, "the file is damaged; copy it again",
                     "the dump was cut short; write it again")
    if read is None:
        return None
    text, stat, content_hash = read
    parsed = parse_traceviz_txt(text) if path.suffix == ".txt" else parse_topology_json(text)
    shown = display_path(path)
    table = topology_table(
        parsed, run_id, shown, content_hash,
        stat.st_size, stat.st_mtime_ns, dt.datetime.now(dt.timezone.utc),
    )
    final = warehouse.partition_dir("topology_groups", run_id) / (
        f"{topology_id_for(run_id, shown)}.parquet")
    tmp = lake.write_parquet_tmp(table, final, token)
    if before_commit is not None:
        before_commit()
    os.replace(tmp, final)
    return table.num_rows
