"""Model/batch config dump for a Megatron-LM job: ``model_config.json`` beside the topology.

Why: MFU needs the model FLOPs of an iteration, which depend on the model
and batch (Megatron-LM's ``num_floating_point_operations``), not on anything
a profiler trace records. Rank 0 writes the arguments that formula reads,
under Megatron-LM's own names, into the folder the traces and
``topology.json`` go to; ingest loads the file into the lake table
``model_configs`` and int_model_flops_computed applies Megatron's formula
(format: :mod:`tracehouse.core.model_config_format`).

Only arguments that are set are written: an argument Megatron left at None
(``num_query_groups`` without GQA, ``num_experts`` for a dense model) is
left out and the warehouse applies Megatron's default, as Megatron does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracehouse.core.model_config_format import (
    MODEL_CONFIG_FLAGS,
    MODEL_CONFIG_FORMAT,
    MODEL_CONFIG_INTEGERS,
    MODEL_CONFIG_NAME,
)

__all__ = ["dump_model_config", "model_config_from_args"]

#: Layout arguments written for the reader (not used by the FLOPs).
_LAYOUT_ARGS = ("pipeline_model_parallel_size", "context_parallel_size",
                "expert_model_parallel_size", "data_parallel_size")


def model_config_from_args(args: Any) -> dict:
    """The file's content from Megatron-LM's parsed arguments (``get_args()``).

    ``args`` is any object with Megatron's argument names as attributes (an
    ``argparse.Namespace``); ``params_dtype`` (a ``torch.dtype`` after
    ``validate_args``) is written as its name, ``torch.bfloat16``.
    """
    megatron_args: dict[str, Any] = {}
    for name in (*MODEL_CONFIG_INTEGERS, *_LAYOUT_ARGS):
        value = getattr(args, name, None)
        if value is not None:
            megatron_args[name] = value
    for name in MODEL_CONFIG_FLAGS:
        megatron_args[name] = bool(getattr(args, name, False))
    dtype = getattr(args, "params_dtype", None)
    if dtype is not None:
        megatron_args["params_dtype"] = str(dtype)
    return {"format": MODEL_CONFIG_FORMAT, "source": "megatron", "megatron_args": megatron_args}


def dump_model_config(args: Any, out_dir: Path | str) -> Path:
    """Write ``model_config.json`` into ``out_dir`` (rank 0 only) and return its path.

    Written to a temporary and renamed, so a reader never sees half a file.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MODEL_CONFIG_NAME
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(model_config_from_args(args), indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
