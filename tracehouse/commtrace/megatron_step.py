"""One rank of ``tracehouse commtrace``: a real megatron-core training step on the meta device.

This module is the Megatron half (the layout, the model, the step and the
Megatron-LM parts it mirrors); :mod:`.interception` is the torch half that
logs each collective.

Why this shape: every collective a Megatron layout issues is decided by
megatron-core's own code (``parallel_state`` groups, the tensor-parallel
layers, the pipeline schedules, DDP's gradient buckets, the optimizers), so
the only trustworthy list of them is the one megatron-core produces while it
runs. This module runs that code for one rank without GPUs and without the
other ranks:

* torch's fake process group (``cpu:fake,meta:fake`` on a ``FakeStore``)
  never talks to peers, so a rank runs alone and any subset of ranks can be
  traced in parallel processes (Genstack's real gloo rendezvous stalls past
  about 64 ranks);
* parameters, activations and gradients live on the ``meta`` device: shapes
  and dtypes are real, memory is not allocated, so a 175B-wide layer costs
  nothing;
* a ``TorchDispatchMode`` sees every ``c10d`` op (the level below
  ``torch.distributed``), so ``all_gather_into_tensor``,
  ``reduce_scatter_tensor`` and the coalesced calls that DDP and the
  distributed optimizer issue are logged like the rest, with the group's
  global ranks, dtype, element counts and the innermost Megatron call site.

The shims are few and named: ``torch.cuda`` calls that megatron-core makes
unconditionally become meta-device answers, a no-op RNG tracker replaces the
CUDA one, ``.item()`` on a meta tensor answers a neutral value (1, or False
for booleans), and ops without a meta kernel (``allreduce_coalesced_``) are
logged and answered with a completed work object. The parts of a training
step that live in Megatron-LM's ``megatron/training`` and ``pretrain_gpt.py``
rather than in megatron-core (start-up barrier and time all-reduce, the
data-iterator flag broadcast, ``get_batch_on_this_tp_rank``'s broadcasts,
the loss all-reduce of ``train_step``) are issued by small functions below
that mirror them; their events carry an ``emulated`` call site saying so.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from .interception import (
    CaptureState,
    emulating,
    install_shims,
    patch_batch_p2p,
    patch_object_collectives,
)

__all__ = ["RankSpec", "trace_rank"]


@dataclass(frozen=True)
class RankSpec:
    """Everything one rank's trace depends on (picklable: it crosses the process pool)."""

    rank: int
    world: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int | None
    vpp: int | None
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    vocab_divisible_by: int
    ffn_hidden: int | None
    num_experts: int | None
    microbatches: int
    micro_batch_size: int
    sequence_parallel: bool
    distributed_optimizer: bool
    overlap_grad_reduce: bool
    bucket_size: int | None
    dtype: str  # fp32 | bf16 | fp16
    emulate_training_loop: bool
    order: str


class _NoRngTracker:
    """Megatron's CUDA RNG tracker without CUDA: forking a stream does nothing."""

    def __init__(self) -> None:
        self.states_: dict[str, Any] = {}

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict[str, Any]:
        return dict(self.states_)

    def set_states(self, states: dict[str, Any]) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        self.states_[name] = seed

    def is_initialized(self) -> bool:
        return True

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        yield


def _patch_norm_for_sequence_parallel() -> None:
    """Let the local spec's torch LayerNorm run under sequence parallelism.

    megatron-core's ``WrappedTorchNorm`` refuses ``sequence_parallel`` only
    because torch's norm does not mark its parameters; the communication
    sequence parallelism adds lives in the linear layers (all-gather and
    reduce-scatter of activations) and in ``finalize_model_grads`` (the TP
    all-reduce of norm gradients, for parameters marked
    ``sequence_parallel``). This builds the same torch norm and marks its
    parameters as Transformer Engine's norm does.
    """
    import torch
    from megatron.core.transformer import torch_norm

    if getattr(torch_norm.WrappedTorchNorm, "_tracehouse", False):
        return

    def build(cls: Any, config: Any, hidden_size: int, eps: float = 1e-5,
              persist_layer_norm: bool = False, zero_centered_gamma: bool = False,
              normalization: str = "LayerNorm") -> Any:
        norm_class = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = norm_class(normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm

    torch_norm.WrappedTorchNorm.__new__ = build  # type: ignore[method-assign]
    torch_norm.WrappedTorchNorm._tracehouse = True  # type: ignore[attr-defined]


def _torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron's ``_vocab_size_with_padding``: a multiple of ``divisible_by * tp``."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab / multiple) * multiple)


def trace_rank(spec: RankSpec) -> list[dict[str, Any]]:
    """Run one training step of ``spec``'s layout as ``spec.rank``; return its comm log.

    It patches this process's torch (``torch.cuda``, ``torch.distributed``
    object collectives and ``batch_isend_irecv``, megatron-core's norm under
    sequence parallelism) and leaves them patched: call it in a process of
    its own, as :func:`tracehouse.commtrace.run.run_commtrace` does (one forked
    worker per rank).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _trace_rank(spec)


def _trace_rank(spec: RankSpec) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    CaptureState.events = []
    CaptureState.rank = spec.rank
    CaptureState.in_step = False
    function_mode, dispatch_mode = install_shims()
    patch_batch_p2p()
    patch_object_collectives()
    if spec.sequence_parallel:
        _patch_norm_for_sequence_parallel()
    tensor_parallel.random._CUDA_RNG_STATE_TRACKER = _NoRngTracker()
    tensor_parallel.random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True

    dist.init_process_group("cpu:fake,meta:fake", store=FakeStore(), rank=spec.rank,
                            world_size=spec.world)
    try:
        with function_mode, dispatch_mode, torch.device("meta"):
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=spec.tp,
                pipeline_model_parallel_size=spec.pp,
                virtual_pipeline_model_parallel_size=spec.vpp,
                context_parallel_size=spec.cp,
                expert_model_parallel_size=spec.ep,
                expert_tensor_parallel_size=spec.etp,
                order=spec.order,
                create_gloo_process_groups=False,
            )
            _training_step(spec)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    return list(CaptureState.events)


def _training_step(spec: RankSpec) -> None:
    """Megatron-LM's ``pretrain`` reduced to one iteration, megatron-core doing the work."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func

    dtype = _torch_dtype(spec.dtype)
    if spec.emulate_training_loop:
        with emulating("megatron/training/initialize.py:initialize_megatron"):
            dist.barrier()
        with emulating("megatron/training/training.py:pretrain"):
            start = torch.tensor([0.0], dtype=torch.float64, device="meta")
            dist.all_reduce(start, op=dist.ReduceOp.MIN)
    config, chunks = _build_model(spec, dtype)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=spec.overlap_grad_reduce,
        use_distributed_optimizer=spec.distributed_optimizer,
        bucket_size=spec.bucket_size,
    )
    model = [
        DistributedDataParallel(config=config, ddp_config=ddp_config, module=chunk,
                                disable_bucketing=(index > 0))
        for index, chunk in enumerate(chunks)
    ]
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, bf16=spec.dtype == "bf16",
                        fp16=spec.dtype == "fp16", params_dtype=dtype,
                        use_distributed_optimizer=spec.distributed_optimizer,
                        clip_grad=1.0),
        model,
        use_gloo_process_groups=False,  # gloo cannot run on the fake store
    )
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
    if spec.overlap_grad_reduce:
        config.no_sync_func = [chunk.no_sync for chunk in model]
        if len(model) == 1:
            config.no_sync_func = config.no_sync_func[0]
        config.grad_sync_func = [chunk.start_grad_sync for chunk in model]
        if len(model) == 1:
            config.grad_sync_func = config.grad_sync_func[0]
    if spec.emulate_training_loop:
        with emulating("megatron/training/training.py:build_train_valid_test_data_iterators"):
            flags = torch.tensor([1, 0, 0], dtype=torch.long, device="meta")
            dist.broadcast(flags, 0)
    CaptureState.in_step = True  # what a profiler around one train_step would see
    for chunk in model:
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    forward_backward = get_forward_backward_func()
    iterators = [iter(range(spec.microbatches)) for _ in model]
    losses = forward_backward(
        forward_step_func=partial(_forward_step, spec),
        data_iterator=iterators if len(model) > 1 else iterators[0],
        model=model if len(model) > 1 else model[0],
        num_microbatches=spec.microbatches,
        seq_length=spec.seq,
        micro_batch_size=spec.micro_batch_size,
        decoder_seq_length=spec.seq,
        forward_only=False,
    )
    optimizer.step()
    if spec.emulate_training_loop and parallel_state.is_pipeline_last_stage(ignore_virtual=True):
        with emulating("megatron/training/training.py:train_step"):
            reporting = torch.zeros(2, dtype=torch.float32, device="meta")
            dist.all_reduce(reporting,
                            group=parallel_state.get_data_parallel_group(with_context_parallel=True))
    del losses


def _build_model(spec: RankSpec, dtype: Any) -> tuple[Any, list[Any]]:
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    config = TransformerConfig(
        num_layers=spec.layers,
        hidden_size=spec.hidden,
        num_attention_heads=spec.heads,
        ffn_hidden_size=spec.ffn_hidden,
        tensor_model_parallel_size=spec.tp,
        pipeline_model_parallel_size=spec.pp,
        virtual_pipeline_model_parallel_size=spec.vpp,
        context_parallel_size=spec.cp,
        expert_model_parallel_size=spec.ep,
        expert_tensor_parallel_size=spec.etp,
        num_moe_experts=spec.num_experts,
        sequence_parallel=spec.sequence_parallel,
        use_cpu_initialization=True,
        perform_initialization=False,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=spec.dtype == "bf16",
        fp16=spec.dtype == "fp16",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_dropout_fusion=False,
        gradient_accumulation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
    )
    layer_spec = get_gpt_layer_local_spec(num_experts=spec.num_experts)
    vocab = padded_vocab(spec.vocab, spec.vocab_divisible_by, spec.tp)
    chunks = []
    for stage in range(spec.vpp or 1):
        vp_stage = stage if spec.vpp else None
        chunk = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec,
            vocab_size=vocab,
            max_sequence_length=spec.seq,
            pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False,
                                                               vp_stage=vp_stage),
            post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False,
                                                               vp_stage=vp_stage),
            share_embeddings_and_output_weights=True,
            vp_stage=vp_stage,
        )
        chunk.to(dtype)
        chunks.append(chunk)
    return config, chunks


def _get_batch(spec: RankSpec, vp_stage: int | None) -> tuple[Any, ...]:
    """Megatron-LM's ``get_batch_on_this_tp_rank``: TP rank 0 broadcasts the batch pieces."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    mbs, seq = spec.micro_batch_size, spec.seq
    tokens = torch.empty((mbs, seq), dtype=torch.int64, device="meta")
    labels = torch.empty((mbs, seq), dtype=torch.int64, device="meta")
    loss_mask = torch.empty((mbs, seq), dtype=torch.float32, device="meta")
    attention_mask = torch.empty((mbs, 1, seq, seq), dtype=torch.bool, device="meta")
    position_ids = torch.empty((mbs, seq), dtype=torch.int64, device="meta")
    first = parallel_state.is_pipeline_first_stage(ignore_virtual=True)
    last = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
    # pretrain_gpt.get_batch: a model chunk that is neither the first nor the last
    # virtual stage gets no batch at all (no broadcasts).
    chunk_first = parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
    chunk_last = parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    if spec.vpp and not chunk_first and not chunk_last:
        pieces: list[Any] = []
    elif spec.pp == 1:
        pieces = [tokens, labels, loss_mask, attention_mask, position_ids]
    elif first:
        pieces = [tokens, attention_mask, position_ids]
    elif last:
        pieces = [labels, loss_mask, attention_mask]
    else:
        pieces = []
    with emulating("megatron/training/utils.py:get_batch_on_this_tp_rank"):
        for piece in pieces:
            dist.broadcast(piece, parallel_state.get_tensor_model_parallel_src_rank(),
                           group=parallel_state.get_tensor_model_parallel_group())
    return tokens, labels, loss_mask, attention_mask, position_ids


def _forward_step(spec: RankSpec, data_iterator: Any, model: Any) -> tuple[Any, Any]:
    """``pretrain_gpt.forward_step``: batch, model forward, and the loss function."""
    import torch

    if data_iterator is not None:
        next(data_iterator, None)
    module = model
    while hasattr(module, "module"):  # DDP -> GPTModel
        module = module.module
    tokens, labels, loss_mask, attention_mask, position_ids = _get_batch(
        spec, getattr(module, "vp_stage", None))
    output = model(tokens, position_ids, attention_mask, labels=labels)

    def loss_func(output_tensor: Any) -> tuple[Any, Any, dict[str, Any]]:
        losses = output_tensor.float()
        loss = torch.sum(losses.view(-1) * loss_mask.view(-1))
        num_tokens = loss_mask.sum().to(torch.int)
        reporting = torch.cat([loss.detach().view(1), num_tokens.view(1).float()])
        return loss, num_tokens, {"lm loss": reporting}

    return output, loss_func

