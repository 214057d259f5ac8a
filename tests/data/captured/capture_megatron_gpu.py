"""Capture a real megatron-core GPT training run on one GPU, profiled through the Megatron patch.

Why this exists: the shared megatron-core captures (../shared/data/kineto/
megatron_cpu) ran on CPU, so no trace had Megatron's schedule frames and
real GPU kernels with shapes together: the per-phase and per-microbatch
efficiency rollups and the Megatron phases of fct_kernels had never met a
real GPU step. This script runs megatron-core's own GPTModel, DDP,
DistributedOptimizer and ``get_forward_backward_func()`` on one GPU (TP1,
PP1, DP1: one GPU cannot hold a second NCCL rank), with the profiler and the
topology/model-config dumps of tracehouse's ``megatron_patch`` as a patched
Megatron-LM would call them.

Writes into ``OUT_DIR``: the patch's per-iteration traces
(``iteration_N/rank_0...pt.trace.json.gz``), ``topology.json`` and
``model_config.json``; beside it ``OUT_DIR.measured.json``: the unprofiled
iteration times (CUDA events), the device and versions.

Run on a CUDA machine with megatron-core installed:
``python capture_megatron_gpu.py OUT_DIR [--layers 8 --hidden 2048 ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[3]


def _args(a: argparse.Namespace) -> argparse.Namespace:
    """Megatron-LM's parsed arguments for this run, as ``get_args()`` would hold them."""
    return argparse.Namespace(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
        seq_length=a.seq, micro_batch_size=1, global_batch_size=a.microbatches,
        ffn_hidden_size=4 * a.hidden, padded_vocab_size=a.vocab, vocab_size=a.vocab,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        context_parallel_size=1, expert_model_parallel_size=1, data_parallel_size=1,
        swiglu=False, group_query_attention=False, params_dtype=torch.bfloat16,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32768)
    a = p.parse_args()
    sys.path.insert(0, str(REPO))
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer import TransformerConfig

    from megatron_patch.hooks import build_profiler, on_model_parallel_initialized

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ["PROFILER_GZIP"] = "1"
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)
    args = _args(a)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    on_model_parallel_initialized(a.out_dir, args=args)

    config = TransformerConfig(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
        ffn_hidden_size=4 * a.hidden, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        bf16=True, hidden_dropout=0.0, attention_dropout=0.0, bias_dropout_fusion=False,
        gradient_accumulation_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False,
    )
    gpt = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                   vocab_size=a.vocab, max_sequence_length=a.seq, pre_process=True,
                   post_process=True, share_embeddings_and_output_weights=False).cuda()
    gpt.to(torch.bfloat16)
    model = DistributedDataParallel(
        config=config, module=gpt,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                 overlap_grad_reduce=True,
                                                 use_distributed_optimizer=True))
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, bf16=True, params_dtype=torch.bfloat16,
                        use_distributed_optimizer=True, clip_grad=1.0), [model])
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = model.no_sync
    config.grad_sync_func = model.start_grad_sync

    tokens = torch.randint(0, a.vocab, (1, a.seq + 1), device="cuda")
    position_ids = torch.arange(a.seq, device="cuda").unsqueeze(0)
    loss_mask = torch.ones((1, a.seq), device="cuda")

    def loss_func(output: Any) -> tuple[Any, dict]:
        losses = output.float().view(-1)
        loss = (losses * loss_mask.view(-1)).sum() / loss_mask.sum()
        return loss, {"lm loss": loss.detach()}

    def forward_step(data_iterator: Any, model: Any) -> tuple[Any, Any]:
        next(data_iterator)
        output = model(tokens[:, :-1], position_ids, None, labels=tokens[:, 1:])
        return output, loss_func

    forward_backward = get_forward_backward_func()

    def train_step() -> None:
        model.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(forward_step_func=forward_step,
                         data_iterator=iter(range(a.microbatches)), model=model,
                         num_microbatches=a.microbatches, seq_length=a.seq,
                         micro_batch_size=1, forward_only=False)
        optimizer.step()

    def timed(n: int) -> list[float]:
        times = []
        for _ in range(n):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            train_step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times

    timed(3)
    unprofiled_ms = timed(10)
    # Megatron's --profile-step-start 2 --profile-step-end 4: iterations 2 and 3 traced.
    prof = build_profiler(rank=0, profile_ranks=[0], profile_step_start=2, profile_step_end=4,
                          out_dir=a.out_dir, first_iteration=0)
    prof.start()
    for _ in range(5):
        prof.step()
        train_step()
    prof.stop()
    torch.cuda.synchronize()
    measured = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "args": vars(a) | {"out_dir": None},
        "unprofiled_iteration_ms": unprofiled_ms,
    }
    measured_path = a.out_dir.with_name(a.out_dir.name + ".measured.json")
    measured_path.write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps({k: measured[k] for k in ("device", "unprofiled_iteration_ms")}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
