"""Capture a real PyTorch-profiler trace of a small GPT training step on one GPU.

Why this exists: no trace in ../shared/data was recorded on a Hopper GPU
with operator shapes, so the efficiency marts (FLOPs per kernel, roofline,
MFU) had never met a real trace where every GEMM and attention kernel can be
counted. This script is how the vendored capture beside it was made, so that
anyone with a GPU can make it again (or at another size) and see the same
checks hold.

What it records, in ``OUT_DIR``:
- ``rank-0.pt.trace.json.gz``: Kineto's Chrome trace of two profiled
  iterations (``ProfilerStep#N``), recorded with ``record_shapes=True`` and
  ``with_flops=True``, and CUDA sync events where this torch supports them.
  The step copies its next batch on a side stream and waits for it with a
  CUDA event, and reads the loss with ``.item()``, so the trace holds a
  stream wait and a host sync as a real training loop does.
- ``model_config.json``: the run's Megatron-LM arguments (tracehouse's
  model-config format), so the warehouse computes model FLOPs and MFU.
- ``OUT_DIR.measured.json`` (beside the folder, not in it, so that
  ``tracehouse ingest OUT_DIR`` reads only the trace and the config): what
  torch itself measured, the oracle the tests compare with: the profiler's
  own FLOP count per operator over the profiled iterations
  (``key_averages()``), unprofiled step times from CUDA events, the device,
  torch and CUDA versions.

The model is a plain pre-LayerNorm GPT (no Megatron): QKV, attention through
``scaled_dot_product_attention`` with a causal mask, output projection, a
4h GELU MLP, an untied logits GEMM, bf16 weights and AdamW.

Run: ``python capture_gpt_step.py OUT_DIR [--layers 8 --hidden 2048 ...]``
(``--device cpu`` with tiny sizes checks the script without a GPU).
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

MODEL_CONFIG_FORMAT = "tracehouse-model-config/1"  # tracehouse/core/model_config_format.py


class Block(nn.Module):
    """One pre-LayerNorm transformer layer."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, hidden: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)
        self.logits = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.logits(self.ln(x))


def _megatron_args(a: argparse.Namespace) -> dict:
    """The run as Megatron-LM's arguments (no TP, no GQA, no SwiGLU, 4h FFN)."""
    return {
        "num_layers": a.layers, "hidden_size": a.hidden, "num_attention_heads": a.heads,
        "seq_length": a.seq, "global_batch_size": a.batch, "micro_batch_size": a.batch,
        "ffn_hidden_size": 4 * a.hidden, "padded_vocab_size": a.vocab, "vocab_size": a.vocab,
        "tensor_model_parallel_size": 1, "swiglu": False, "group_query_attention": False,
        "params_dtype": "bf16",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--device", default="cuda")
    p.add_argument("--fused-adamw", action="store_true",
                   help="AdamW's fused CUDA kernel, not its foreach default (a before/after pair)")
    a = p.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = GPT(a.vocab, a.hidden, a.heads, a.layers).to(dev, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=a.fused_adamw or None)
    host_batches = [torch.randint(0, a.vocab, (a.batch, a.seq + 1)) for _ in range(2)]
    if cuda:
        host_batches = [t.pin_memory() for t in host_batches]
    copy_stream = torch.cuda.Stream() if cuda else None

    def fetch(i: int) -> torch.Tensor:
        """Copy the next batch on a side stream and make the main stream wait for it."""
        if not cuda:
            return host_batches[i % 2].to(dev)
        with torch.cuda.stream(copy_stream):
            t = host_batches[i % 2].to(dev, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(copy_stream)
        torch.cuda.current_stream().wait_event(ready)
        t.record_stream(torch.cuda.current_stream())
        return t

    def step(i: int) -> float:
        tokens = fetch(i)
        out = model(tokens[:, :-1])
        loss = F.cross_entropy(out.float().view(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # a host sync, as a training loop's logging does

    def timed_steps(n: int) -> list[float]:
        times = []
        for i in range(n):
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                step(i)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                step(i)
                times.append((time.perf_counter() - t0) * 1e3)
        return times

    timed_steps(3)  # warm-up: kernels chosen, allocator settled
    unprofiled_ms = timed_steps(10)

    a.out_dir.mkdir(parents=True, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    extra = {}
    try:
        extra["experimental_config"] = torch._C._profiler._ExperimentalConfig(
            enable_cuda_sync_events=True)
    except (AttributeError, TypeError):
        pass
    raw = a.out_dir / "rank-0.pt.trace.json"
    with torch.profiler.profile(
        activities=activities, record_shapes=True, with_flops=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(raw)), **extra,
    ) as prof:
        for i in range(4):
            step(i)
            prof.step()
    flops = {e.key: e.flops for e in prof.key_averages() if e.flops}
    with open(raw, "rb") as src, gzip.GzipFile(raw.with_suffix(".json.gz"), "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()

    (a.out_dir / "model_config.json").write_text(json.dumps(
        {"format": MODEL_CONFIG_FORMAT, "source": "capture_gpt_step.py",
         "megatron_args": _megatron_args(a)}, indent=2) + "\n")
    measured = {
        "device": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "args": vars(a) | {"out_dir": None},
        "profiled_iterations": 2,
        "torch_profiler_flops_by_op": flops,
        "unprofiled_step_ms": unprofiled_ms,
        "sync_events_requested": "experimental_config" in extra,
    }
    measured_path = a.out_dir.with_name(a.out_dir.name + ".measured.json")
    measured_path.write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps({k: measured[k] for k in ("device", "torch", "unprofiled_step_ms")}))


if __name__ == "__main__":
    main()
