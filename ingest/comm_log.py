"""Comm logs (``comm_log_rank_<r>.json``) -> the ``comm_log_events`` lake table.

Two writers share the format: Genstack's tracer (seed 04; records ``op``,
``call_id``, ``src_rank`` and, per op, ``ranks``, ``shape``, ``dtype``,
``peer``, ...) and ``tracehouse commtrace``, which writes the same records
plus ``nelems``, ``out_nelems``, ``bytes``, ``group_desc`` and
``call_site``. A log is one JSON array per rank, in call order; a
``config.json`` beside it (both write one) gives the layout.

Each record becomes one row with typed columns (the collective family, the
group's global ranks, the P2P peer, element counts and bytes) and the whole
record as JSON. Bytes follow nccl-tests' "size": the full buffer of the
collective (the gathered output of an all-gather, the input of a
reduce-scatter), so bus-bandwidth factors apply directly. A file lands by
one rename (``comm_log_events/run=<run>/<file_id>.parquet``) or not at all;
a bad file raises :class:`~ingest.trace_types.TraceError` naming the problem.
Reloads are incremental as for PP-timer logs (path, size, mtime, hash).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracehouse.core.warehouse import Warehouse

from .schema import COMM_LOG_EVENTS
from .side_files import ManifestEntry, land_rows, read_manifest, read_text
from .trace_types import TraceError

__all__ = [
    "COMM_LOG_NAME",
    "is_comm_log_name",
    "load_comm_log_file",
    "parse_comm_log",
    "read_comm_log_manifest",
]

COMM_LOG_NAME = re.compile(r"^comm_log_rank_(?P<rank>\d+)\.json$")
_HINT = ("expected a JSON array of records such as {\"op\": \"all_reduce\", \"call_id\": 5, "
         "\"ranks\": [0, 1], \"shape\": [1024, 768], \"dtype\": \"torch.float32\", "
         "\"src_rank\": 0}, as Genstack and `tracehouse commtrace` write")

#: Logged op -> collective family (what bandwidth factors and algorithms depend on).
FAMILIES: dict[str, str] = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "all_gather_coalesced": "all_gather",
    "_all_gather_base": "all_gather", "all_gather_object": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "broadcast": "broadcast", "broadcast_object_list": "broadcast",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
    "send": "send", "isend": "send", "batch_isend": "send",
    "recv": "recv", "irecv": "recv", "batch_irecv": "recv",
}
_SETUP = frozenset({"init_process_group", "new_group"})
_DTYPE_BYTES = {
    "float64": 8, "double": 8, "int64": 8, "long": 8, "complex64": 8,
    "float32": 4, "float": 4, "int32": 4, "int": 4,
    "float16": 2, "half": 2, "bfloat16": 2, "int16": 2,
    "uint8": 1, "int8": 1, "bool": 1,
}


def is_comm_log_name(name: str) -> bool:
    """True for the file names ingest loads into ``comm_log_events``."""
    return bool(COMM_LOG_NAME.match(name))


def _bad(message: str, hint: str = _HINT) -> TraceError:
    return TraceError("invalid_comm_log", message, hint)


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a logged dtype (``torch.float32``), None when unknown (fp8...)."""
    if not dtype:
        return None
    name = dtype.rsplit(".", 1)[-1]
    if name.startswith("float8"):
        return 1
    return _DTYPE_BYTES.get(name)


def _int_list(value: Any, key: str, index: int) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
            isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value):
        raise _bad(f"record {index}: {key!r} is {value!r}, not a list of non-negative integers")
    return value


def _opt_int(value: Any, key: str, index: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"record {index}: {key!r} is {value!r}, not an integer")
    return value


def _numel(shape: list[int] | None) -> int | None:
    return None if shape is None else math.prod(shape)


def _shapes_numel(value: Any, key: str, index: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad(f"record {index}: {key!r} is not a list of shapes")
    return sum(_numel(_int_list(shape, key, index)) or 0 for shape in value)


def parse_comm_log(text: str, name: str) -> list[dict[str, Any]]:
    """Rows (without file and layout columns) of one comm log; raises TraceError when bad."""
    match = COMM_LOG_NAME.match(name)
    if match is None:
        raise _bad(f"file name {name!r} is not comm_log_rank_<rank>.json",
                   "rename it as the tracer wrote it")
    file_rank = int(match["rank"])
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if not isinstance(records, list):
        raise _bad("not a JSON array of records")
    rows = []
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("op"), str):
            raise _bad(f"record {index} is not an object with an 'op' string")
        rows.append(_row(record, index, file_rank))
    return rows


def _row(record: dict[str, Any], index: int, file_rank: int) -> dict[str, Any]:
    op = record["op"]
    rank = _opt_int(record.get("src_rank"), "src_rank", index)
    if rank is not None and rank != file_rank:
        raise _bad(f"record {index}: src_rank {rank} but the file name says rank {file_rank}",
                   "the file was renamed; keep comm_log_rank_<src_rank>.json")
    family = FAMILIES.get(op, "setup" if op in _SETUP else "other")
    is_p2p = family in ("send", "recv")
    ranks = _int_list(record.get("ranks"), "ranks", index)
    shape = _int_list(record.get("shape", record.get("tensor_shape")), "shape", index)
    dtype = record.get("dtype") if isinstance(record.get("dtype"), str) else None
    peer = _opt_int(record.get("peer", record.get("dst" if family == "send" else "src")
                               if is_p2p else None), "peer", index)
    if is_p2p and record.get("peer_rank") is not None:
        peer = _opt_int(record.get("peer_rank"), "peer_rank", index)
    root = None if is_p2p else _opt_int(record.get("src", record.get("dst")), "src", index)
    nelems = _opt_int(record.get("nelems"), "nelems", index)
    out_nelems = _opt_int(record.get("out_nelems"), "out_nelems", index)
    if nelems is None:  # Genstack's records: element counts from the shapes
        own = _numel(shape)
        outputs = _shapes_numel(record.get("output_shapes"), "output_shapes", index)
        inputs = _shapes_numel(record.get("input_shapes"), "input_shapes", index)
        if family == "all_gather":
            nelems, out_nelems = own, outputs if outputs is not None else own
        elif family == "reduce_scatter":
            nelems = inputs if inputs is not None else own
            out_nelems = _numel(_int_list(record.get("output_shape"), "output_shape", index)
                                ) or own
        else:
            nelems = out_nelems = own
    size = dtype_bytes(dtype)
    logged_bytes = _opt_int(record.get("bytes"), "bytes", index)
    if logged_bytes is None and size is not None and nelems is not None:
        logged_bytes = max(nelems, out_nelems or 0) * size
    if family == "barrier":
        logged_bytes = 0
    call_site = record.get("call_site") if isinstance(record.get("call_site"), str) else None
    group_desc = record.get("group_desc") if isinstance(record.get("group_desc"), str) else None
    return {
        "rank": file_rank, "seq": index,
        "call_id": _opt_int(record.get("call_id"), "call_id", index),
        "op": op, "collective": family, "is_setup": op in _SETUP, "is_p2p": is_p2p,
        "is_send": family == "send" if is_p2p else None,
        "group_ranks": None if is_p2p else ranks,
        "group_size": None if is_p2p or ranks is None else len(ranks),
        "peer_rank": peer if is_p2p else None, "root_rank": root,
        "dtype": dtype, "shape": shape, "nelems": nelems, "out_nelems": out_nelems,
        "bytes": logged_bytes,
        "reduce_op": record.get("reduce_op") if isinstance(record.get("reduce_op"), str) else None,
        "group_desc": group_desc, "call_site": call_site,
        "is_emulated": call_site.endswith("(emulated)") if call_site else None,
        "in_step": record.get("in_step") if isinstance(record.get("in_step"), bool) else None,
        "batch_idx": _opt_int(record.get("batch_idx"), "batch_idx", index),
        "batch_size": _opt_int(record.get("batch_size"), "batch_size", index),
        "coalesced": _opt_int(record.get("coalesced"), "coalesced", index),
        "coalesced_index": _opt_int(record.get("coalesced_index"), "coalesced_index", index),
        "log_format": "tracehouse" if "call_site" in record else "genstack",
        "record": json.dumps(record, ensure_ascii=False, separators=(",", ":")),
    }


def _layout(path: Path) -> dict[str, Any]:
    """Layout columns from ``config.json`` beside the log (Genstack's keys), else NULLs."""
    names = {"world_size": "world_size", "tp_size": "tensor_model_parallel_size",
             "pp_size": "pipeline_model_parallel_size", "dp_size": "data_parallel_size",
             "cp_size": "context_parallel_size"}
    empty: dict[str, Any] = {key: None for key in names} | {"model_size": None}
    try:
        config = json.loads((path.parent / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return empty
    if not isinstance(config, dict):
        return empty
    layout = {key: config.get(source) if isinstance(config.get(source), int) else None
              for key, source in names.items()}
    if layout["cp_size"] is None and layout["world_size"] is not None:
        layout["cp_size"] = 1
    model = config.get("model_size")
    layout["model_size"] = model if isinstance(model, str) else None
    return layout


def read_comm_log_manifest(warehouse: Warehouse) -> dict[tuple[str, str], ManifestEntry]:
    """Every loaded comm log, keyed by (run, path), read back from the lake table."""
    return read_manifest(warehouse, "comm_log_events")


def load_comm_log_file(warehouse: Warehouse, run_id: str, path: Path, token: str,
                       known: ManifestEntry | None = None, *,
                       before_commit: Callable[[], None] | None = None) -> int | None:
    """Parse one comm log and land its rows atomically (``before_commit`` runs just
    before they are renamed into place).

    Returns the row count, or None when ``known`` shows the same content is
    already loaded. Raises :class:`TraceError` when the file cannot be read
    or parsed; nothing is written then (an earlier version stays loaded).
    """
    read = read_text(path, known, _bad, "the file is damaged; write it again",
                     "the tracer's write was cut short; trace the rank again")
    if read is None:
        return None
    text, stat, content_hash = read
    rows = parse_comm_log(text, path.name)
    return land_rows(warehouse, "comm_log_events", COMM_LOG_EVENTS, "comm_log", run_id, path,
                     rows, token, stat, content_hash, extra=_layout(path),
                     before_commit=before_commit)
