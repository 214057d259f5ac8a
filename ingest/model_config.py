"""Model and batch configuration files (``model_config*.json``) into ``model_configs``.

Why: Megatron-LM judges a run by its model FLOPs per iteration
(``num_floating_point_operations`` in ``megatron/training/training.py``),
which depend on the model and batch, not on anything a profiler trace
records. The Megatron patch dumps the arguments that formula reads beside
the topology file, and ``tracehouse simulate`` writes the same file with the
FLOPs its cost model assumes; this module lands one row per file, and the
formula itself lives in the dbt models (int_model_flops_computed), once.

Format (``"format": "tracehouse-model-config/1"``, tracehouse.core.model_config_format)::

    {"format": ..., "source": "megatron" | "simulate" | ...,
     "megatron_args": {"num_layers": 32, "hidden_size": 4096, ...},
     "flops_per_iteration": 1.2e18}      # optional: the producer's own figure

A flat object of Megatron argument names is read too (``megatron_args``
missing). Unknown arguments are kept in the ``config`` JSON column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracehouse.core.model_config_format import (
    MODEL_CONFIG_FORMAT,
    MODEL_CONFIG_INTEGERS,
    PARAMS_DTYPES,
)
from tracehouse.core.warehouse import Warehouse

from .schema import MODEL_CONFIGS
from .side_files import ManifestEntry, land_rows, read_manifest, read_text
from .trace_types import TraceError

__all__ = ["MODEL_CONFIG_FORMAT", "is_model_config_name", "load_model_config_file",
           "parse_model_config", "read_model_config_manifest"]

_NAME = re.compile(r"^model_config.*\.json$")
_HINT = ('expected {"megatron_args": {"num_layers": ..., "hidden_size": ..., '
         '"num_attention_heads": ..., "seq_length": ..., "global_batch_size": ...}}')


def is_model_config_name(name: str) -> bool:
    """True for a model/batch configuration file name (``model_config*.json``)."""
    return bool(_NAME.match(name))


def _bad(message: str, hint: str = _HINT) -> TraceError:
    return TraceError("bad_model_config", message, hint)


def _params_dtype(value: Any) -> str | None:
    """The training dtype under the name the marts read (``torch.bfloat16``), or None."""
    if value is None:
        return None
    dtype = PARAMS_DTYPES.get(str(value).strip().lower())
    if dtype is None:
        raise _bad(f"megatron_args.params_dtype is {value!r}, not a dtype tracehouse knows",
                   "write one of " + ", ".join(sorted(set(PARAMS_DTYPES.values())))
                   + " (or bf16, fp16, fp32), or leave it out")
    return dtype


def parse_model_config(text: str) -> dict[str, Any]:
    """One ``model_configs`` row (without the file columns) from a file's text.

    Raises :class:`TraceError` naming the argument that is missing or wrong.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(doc, dict):
        raise _bad("not a JSON object")
    args = doc.get("megatron_args", doc)
    if not isinstance(args, dict):
        raise _bad('"megatron_args" is not an object')
    row: dict[str, Any] = {}
    for key, required in MODEL_CONFIG_INTEGERS.items():
        value = args.get(key)
        if value is None:
            if required:
                raise _bad(f"megatron_args.{key} is missing")
            row[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad(f"megatron_args.{key} is {value!r}, not a positive integer")
        row[key] = value
    swiglu = args.get("swiglu", False)
    if not isinstance(swiglu, bool):
        raise _bad(f"megatron_args.swiglu is {swiglu!r}, not true or false")
    row["swiglu"] = swiglu
    row["group_query_attention"] = bool(args.get("group_query_attention", False))
    row["params_dtype"] = _params_dtype(args.get("params_dtype"))
    stated = doc.get("flops_per_iteration")
    if stated is not None and (isinstance(stated, bool) or not isinstance(stated, (int, float))
                               or stated <= 0):
        raise _bad(f"flops_per_iteration is {stated!r}, not a positive number",
                   "leave it out, or give the producer's FLOPs per iteration")
    row["stated_flops_per_iteration"] = float(stated) if stated is not None else None
    source = doc.get("source")
    row["config_source"] = str(source) if source is not None else None
    row["config"] = json.dumps(args, sort_keys=True)
    return row


def read_model_config_manifest(warehouse: Warehouse) -> dict[tuple[str, str], ManifestEntry]:
    """Every loaded model config, keyed by (run, path), read back from the lake table."""
    return read_manifest(warehouse, "model_configs")


def load_model_config_file(warehouse: Warehouse, run_id: str, path: Path, token: str,
                           known: ManifestEntry | None = None, *,
                           before_commit: Callable[[], None] | None = None) -> int | None:
    """Parse one model config and land its row atomically; None when ``known`` shows the
    same content is loaded. Raises :class:`TraceError` (nothing written) on a bad file."""
    read = read_text(path, known, _bad, "the file is damaged; write it again",
                     "the dump was cut short; write it again")
    if read is None:
        return None
    text, stat, content_hash = read
    rows = [parse_model_config(text)]
    return land_rows(warehouse, "model_configs", MODEL_CONFIGS, "model_config", run_id, path,
                     rows, token, stat, content_hash, before_commit=before_commit)
