"""The model/batch config a simulated run writes beside its topology (``model_config.json``).

Why: a real run's Megatron patch dumps the arguments Megatron-LM's FLOPs
formula reads, so the warehouse can compute model FLOPs and MFU per
iteration (fct_iteration_efficiency); a simulated run writes the same file,
and states beside them the FLOPs its own cost model (:mod:`.costs`) runs, so
a test can hold the warehouse's figure against it.

The stated figure counts what the cost model times, the way Megatron counts
model FLOPs: every GEMM of the simulated layers (QKV, projection, the two
MLP GEMMs, the output layer) at 2·m·n·k, forward, dgrad and wgrad; causal
attention at half of 2·2·s²·d per head, forward plus twice that for the
backward (the flash-attention recompute the cost model also times is not
model work); embeddings, norms and elementwise ops not at all. Stated for
dense runs only: the MoE cost model routes tokens in ways Megatron's
closed form does not follow.

The GEMM and attention kernels themselves run more than the model FLOPs:
the flash-attention backward recomputes QKᵀ, 2.5x the forward's FLOPs in
all (FlashAttention's and TraceLens' count, :func:`.costs.attention_flops`)
where Megatron counts 2x. :func:`kernel_flops_per_iteration` states that
figure: what the warehouse finds summed over a run recorded with shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracehouse.core.model_config_format import MODEL_CONFIG_FORMAT, MODEL_CONFIG_NAME

from .config import SimConfig


def global_batch_size(cfg: SimConfig) -> int:
    """Samples per iteration: micro batch x microbatches x data-parallel replicas."""
    return cfg.micro_batch_size * cfg.microbatches * cfg.dp


def _forward_flops(cfg: SimConfig) -> tuple[float, float]:
    """(GEMM, causal attention) FLOPs of one microbatch's forward, summed over the
    ranks of one model replica (TP and CP shards add up to the whole)."""
    h, s, f, v = cfg.hidden, cfg.seq_length, cfg.ffn, cfg.vocab
    tokens = s * cfg.micro_batch_size  # one microbatch, summed over CP ranks
    forward_gemms = cfg.layers * 2 * tokens * (3 * h * h + h * h + f * h + h * f)
    forward_gemms += 2 * tokens * v * h  # output layer
    forward_attention = cfg.layers * cfg.micro_batch_size * 4 * s * s * h * 0.5
    return float(forward_gemms), float(forward_attention)


def cost_model_flops_per_iteration(cfg: SimConfig) -> float | None:
    """Model FLOPs of one iteration as the cost model times them (module docstring);
    None for an MoE run."""
    if cfg.ep > 1:
        return None
    forward_gemms, forward_attention = _forward_flops(cfg)
    per_microbatch = 3 * (forward_gemms + forward_attention)
    return float(per_microbatch * cfg.microbatches * cfg.dp)


def kernel_flops_per_iteration(cfg: SimConfig) -> float | None:
    """FLOPs the GEMM and attention kernels of one iteration run, all ranks
    together: the GEMMs forward, dgrad and wgrad, attention forward plus its
    backward at 2.5x (module docstring); None for an MoE run."""
    if cfg.ep > 1:
        return None
    forward_gemms, forward_attention = _forward_flops(cfg)
    per_microbatch = 3 * forward_gemms + 3.5 * forward_attention
    return float(per_microbatch * cfg.microbatches * cfg.dp)


def model_config(cfg: SimConfig) -> dict:
    """The file's content: Megatron-LM's argument names, and the cost model's FLOPs."""
    args = {
        "num_layers": cfg.layers,
        "hidden_size": cfg.hidden,
        "ffn_hidden_size": cfg.ffn,
        "num_attention_heads": cfg.heads,
        "kv_channels": cfg.hidden // cfg.heads,
        "seq_length": cfg.seq_length,
        "micro_batch_size": cfg.micro_batch_size,
        "global_batch_size": global_batch_size(cfg),
        "padded_vocab_size": cfg.vocab,
        "tensor_model_parallel_size": cfg.tp,
        "pipeline_model_parallel_size": cfg.pp,
        "context_parallel_size": cfg.cp,
        "swiglu": False,
        "group_query_attention": False,
        "params_dtype": "torch.bfloat16",
        "overlap_grad_reduce": cfg.overlap_grad_reduce,
    }
    if cfg.recompute_granularity is not None:
        args["recompute_granularity"] = cfg.recompute_granularity
        if cfg.recompute_granularity == "full":
            args["recompute_method"] = "uniform"
            args["recompute_num_layers"] = cfg.recompute_num_layers
    if cfg.ep > 1:
        args["num_experts"] = cfg.num_experts
        args["expert_model_parallel_size"] = cfg.ep
    doc = {"format": MODEL_CONFIG_FORMAT, "source": "simulate", "megatron_args": args}
    flops = cost_model_flops_per_iteration(cfg)
    if flops is not None:
        doc["flops_per_iteration"] = flops
    return doc


def write_model_config(cfg: SimConfig, out_dir: Path) -> Path:
    """Write ``out_dir/model_config.json`` and return its path."""
    path = Path(out_dir) / MODEL_CONFIG_NAME
    path.write_text(json.dumps(model_config(cfg), indent=1) + "\n")
    return path
