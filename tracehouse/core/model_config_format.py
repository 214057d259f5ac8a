"""The model/batch config file (``model_config.json``): its format, name and arguments.

Why here, in the core: the Megatron patch dumps it from a running job
(``megatron_patch/model_config_dump.py``), ``tracehouse simulate`` writes it
for a simulated run, and ingest reads it (``ingest/model_config.py``); all
three must agree on the format tag and on which of Megatron-LM's arguments
the file carries, and the patch may import nothing above the core.

The arguments are those Megatron-LM's ``num_floating_point_operations``
(``megatron/training/training.py``) reads, under Megatron-LM's own argument
names (``megatron/training/arguments.py``), so a dump is ``vars(args)``
narrowed to them; the formula itself lives in the dbt model
int_model_flops_computed.
"""

from __future__ import annotations

__all__ = ["MODEL_CONFIG_FLAGS", "MODEL_CONFIG_FORMAT", "MODEL_CONFIG_INTEGERS",
           "MODEL_CONFIG_NAME", "PARAMS_DTYPES"]

MODEL_CONFIG_FORMAT = "tracehouse-model-config/1"
#: Name of the file beside ``topology.json`` (ingest reads ``model_config*.json``).
MODEL_CONFIG_NAME = "model_config.json"

#: Integer arguments -> whether the FLOPs need them (else Megatron's default applies).
MODEL_CONFIG_INTEGERS: dict[str, bool] = {
    "num_layers": True,
    "hidden_size": True,
    "num_attention_heads": True,
    "seq_length": True,
    "global_batch_size": True,
    "ffn_hidden_size": False,
    "num_query_groups": False,
    "kv_channels": False,
    "padded_vocab_size": False,
    "vocab_size": False,
    "make_vocab_size_divisible_by": False,
    "tensor_model_parallel_size": False,
    "num_experts": False,
    "moe_router_topk": False,
    "moe_ffn_hidden_size": False,
    "moe_layer_freq": False,
    "moe_shared_expert_intermediate_size": False,
    "micro_batch_size": False,
}

#: Boolean arguments (absent: false).
MODEL_CONFIG_FLAGS: tuple[str, ...] = ("swiglu", "group_query_attention")

#: ``params_dtype`` as written -> the name the marts read (``str(torch.dtype)``,
#: which the Megatron patch writes). Hand-written configs say ``bf16`` or
#: ``bfloat16``; left as they were, the MFU mart found no peak for them and
#: gave NULL without a word, so ingest maps them and refuses any other name.
PARAMS_DTYPES: dict[str, str] = {
    **dict.fromkeys(("torch.bfloat16", "bfloat16", "bf16"), "torch.bfloat16"),
    **dict.fromkeys(("torch.float16", "float16", "fp16", "half", "torch.half"), "torch.float16"),
    **dict.fromkeys(("torch.float32", "float32", "fp32", "float", "torch.float"), "torch.float32"),
}
