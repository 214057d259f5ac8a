"""The GPT model's forward and backward for one microbatch of one model chunk.

Why it looks like this: module frames follow megatron-core's local layer spec
as the reference traces show it (``nn.Module: TransformerLayer_k`` →
``SelfAttention`` → ``ColumnParallelLinear`` ...; module instances numbered per
class in first-call order across the rank's model chunks), forward ops run on
the main thread and record an autograd sequence number, and the backward
replays them in reverse on the autograd thread, each
``autograd::engine::evaluate_function: XBackward`` closing the ``fwdbwd`` flow
its forward op opened. Kernels and their durations come from
:mod:`.costs`; communication from the tensor-, context- and expert-parallel
groups sits where Megatron puts it (row-parallel all-reduce in forward,
asynchronous column-parallel all-reduce overlapped with the weight-gradient
GEMM in backward, all-to-all around the experts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from . import costs, recompute, shapes
from .builder import StageBuilder
from .program import AUTOGRAD

TL = "megatron/core/transformer/transformer_layer.py"
TP_LAYERS = "megatron/core/tensor_parallel/layers.py"
MAPPINGS = "megatron/core/tensor_parallel/mappings.py"
LINEAR_FN = "LinearWithGradAccumulationAndAsyncCommunication"


@dataclass(frozen=True)
class Dims:
    """Per-rank tensor sizes of one microbatch."""

    tokens: int  # tokens this rank processes: seq / cp * micro batch
    norm_tokens: int  # tokens in norms and residual adds (/tp with sequence parallel)
    hidden: int
    ffn: int  # local MLP width: ffn / tp
    heads: int  # local attention heads
    head_dim: int
    vocab: int  # local vocabulary: vocab / tp
    seq: int  # full sequence length (keys attended to)
    micro_batch: int

    @classmethod
    def of(cls, b: StageBuilder) -> Dims:
        cfg = b.cfg
        tokens = cfg.seq_length // cfg.cp * cfg.micro_batch_size
        return cls(
            tokens=tokens,
            norm_tokens=tokens // cfg.tp if cfg.sequence_parallel else tokens,
            hidden=cfg.hidden, ffn=cfg.ffn // cfg.tp, heads=cfg.heads // cfg.tp,
            head_dim=cfg.hidden // cfg.heads, vocab=cfg.vocab // cfg.tp, seq=cfg.seq_length,
            micro_batch=cfg.micro_batch_size)

    @property
    def activation_nelems(self) -> int:
        """Elements of the hidden state passed between pipeline stages."""
        return self.norm_tokens * self.hidden


@dataclass
class LayerNames:
    """Module instance names of one transformer layer."""

    layer: str
    ln1: str
    attn: str
    qkv: str
    core: str
    proj: str
    ln2: str
    mlp: str
    fc1: str
    fc2: str
    router: str = ""


@dataclass
class ChunkPlan:
    """What model chunk ``chunk`` of this stage holds, with module names."""

    chunk: int
    layers: list[LayerNames]
    first_layer: int  # global index of its first transformer layer
    has_embedding: bool
    has_output: bool
    final_ln: str = ""
    output: str = ""
    params: list[tuple[str, int]] = field(default_factory=list)  # (item, numel), forward order
    expert_params: list[tuple[str, int]] = field(default_factory=list)


def plan_chunks(b: StageBuilder) -> list[ChunkPlan]:
    """Module names and parameter counts of every model chunk on this stage."""
    cfg = b.cfg
    counters: Counter = Counter()

    def name(cls: str) -> str:
        counters[cls] += 1
        return f"{cls}_{counters[cls] - 1}"

    h, f_local = cfg.hidden, cfg.ffn // cfg.tp
    moe = cfg.ep > 1
    plans = []
    per_chunk = cfg.layers_per_chunk
    for chunk in range(cfg.vpp):
        virtual_stage = chunk * cfg.pp + b.stage
        has_embedding = virtual_stage == 0
        has_output = virtual_stage == cfg.pp * cfg.vpp - 1
        plan = ChunkPlan(chunk=chunk, layers=[], first_layer=virtual_stage * per_chunk,
                         has_embedding=has_embedding, has_output=has_output)
        if has_embedding:
            name("LanguageModelEmbedding")
            name("VocabParallelEmbedding")
            plan.params.append(("embedding", cfg.vocab // cfg.tp * h))
        for j in range(per_chunk):
            layer = LayerNames(
                layer=name("TransformerLayer"), ln1=name("LayerNorm"), attn=name("SelfAttention"),
                qkv=name("ColumnParallelLinear"), core=name("DotProductAttention"),
                proj=name("RowParallelLinear"), ln2=name("LayerNorm"),
                mlp=name("MoELayer" if moe else "MLP"),
                router=name("TopKRouter") if moe else "",
                fc1=name("GroupedMLP") if moe else name("ColumnParallelLinear"),
                fc2="" if moe else name("RowParallelLinear"),
            )
            plan.layers.append(layer)
            dense = 4 * h * h // cfg.tp + 4 * h
            if moe:
                dense += h * cfg.num_experts
                local_experts = cfg.num_experts // cfg.ep
                plan.expert_params.append(
                    (f"layer{j}", local_experts * 2 * h * cfg.ffn // cfg.expert_tp))
            else:
                dense += 2 * h * f_local
            plan.params.append((f"layer{j}", dense))
        if has_output:
            plan.final_ln = name("LayerNorm")
            plan.output = name("ColumnParallelLinear")
            plan.params.append(("output", cfg.vocab // cfg.tp * h + 2 * h))
        plans.append(plan)
    return plans


class GPTModel:
    """Emits forward/backward of (chunk, microbatch) and remembers autograd seqs."""

    def __init__(self, b: StageBuilder) -> None:
        self.b = b
        self.cfg = b.cfg
        self.d = Dims.of(b)
        self.plans = plan_chunks(b)
        self._seqs: dict[tuple[int, int], dict[str, int | None]] = {}

    # -- forward ------------------------------------------------------------
    def forward(self, chunk: int, mb: int) -> None:
        """``DistributedDataParallel_c`` → ``GPTModel_c`` forward (main thread)."""
        b, d, plan = self.b, self.d, self.plans[chunk]
        seqs: dict[str, int | None] = {}
        self._seqs[(chunk, mb)] = seqs
        with b.module(f"DistributedDataParallel_{chunk}"):
            with b.py("megatron/core/distributed/data_parallel_base.py(18): forward"):
                with b.module(f"GPTModel_{chunk}"):
                    with b.py("megatron/core/models/gpt/gpt_model.py(470): forward"):
                        with b.py("megatron/core/models/gpt/gpt_model.py(284): _preprocess"):
                            if plan.has_embedding:
                                self._embedding_forward(seqs)
                        with b.module(f"TransformerBlock_{chunk}"):
                            with b.py("megatron/core/transformer/transformer_block.py(621): "
                                      "forward"):
                                if self.cfg.recompute_granularity == "full":
                                    self._checkpointed_forward(plan, seqs)
                                else:
                                    for j, names in enumerate(plan.layers):
                                        self._layer_forward(names, seqs, f"L{j}")
                                if plan.has_output:
                                    with b.module(plan.final_ln):
                                        seqs["final_ln"] = b.aten(
                                            "aten::layer_norm", costs.LAYERNORM_FWD,
                                            self._ln_us(), phase="forward", fwd=True,
                                            shapes=self._ln_shapes())
                        if plan.has_output:
                            with b.py("megatron/core/models/gpt/gpt_model.py(559): _postprocess"):
                                self._column_parallel(plan.output, seqs, "output", d.vocab,
                                                      d.hidden)
                                self._cross_entropy(seqs)

    def loss_func(self, chunk: int, mb: int) -> None:
        """``pretrain_gpt.loss_func`` inside ``forward_step_calc_loss`` (last stage)."""
        b, d = self.b, self.d
        seqs = self._seqs[(chunk, mb)]
        with b.py("pretrain_gpt.py(104): loss_func"):
            seqs["loss"] = b.aten("aten::mul", costs.MUL, costs.memory_us(d.tokens * 12),
                                  phase="forward", fwd=True,
                                  shapes=shapes.binary((d.tokens,), shapes.FP32))
            b.aten("aten::sum", costs.REDUCE_SUM, costs.memory_us(d.tokens * 4), phase="forward",
                   shapes=shapes.reduce((d.tokens,), 0))

    def _ln_shapes(self) -> str:
        return shapes.layer_norm(self.d.norm_tokens, self.d.hidden)

    def _ln_us(self) -> float:
        return costs.memory_us(self.d.norm_tokens * self.d.hidden * costs.BF16 * 2)

    def _add_us(self) -> float:
        return costs.memory_us(self.d.norm_tokens * self.d.hidden * costs.BF16 * 3)

    def _embedding_forward(self, seqs: dict) -> None:
        b, d = self.b, self.d
        with b.module("LanguageModelEmbedding_0"):
            with b.py("megatron/core/models/common/embeddings/language_model_embedding.py(98): "
                      "forward"):
                with b.module("VocabParallelEmbedding_0"):
                    with b.py(f"{TP_LAYERS}(268): forward"):
                        seqs["embedding"] = b.aten(
                            "aten::embedding", costs.EMBEDDING_FWD,
                            costs.memory_us(d.tokens * d.hidden * costs.BF16 * 2),
                            phase="forward", fwd=True)
                        self._reduce_from_tp(seqs, "embedding_ar", d.tokens * d.hidden)

    def _reduce_from_tp(self, seqs: dict, tag: str, nelems: int) -> None:
        """Row-parallel output: all-reduce (or reduce-scatter with sequence parallel)."""
        b = self.b
        if self.cfg.tp == 1:
            return
        if self.cfg.sequence_parallel:
            with b.py(f"{MAPPINGS}(497): reduce_scatter_to_sequence_parallel_region"):
                with b.op("_ReduceScatterToSequenceParallelRegion", fwd=True) as seq:
                    seqs[tag] = seq
                    with b.py(f"{MAPPINGS}(309): forward"):
                        b.collective("reduce_scatter", "tp", nelems, nelems // self.cfg.tp,
                                     phase="forward")
            return
        with b.py(f"{MAPPINGS}(475): reduce_from_tensor_model_parallel_region"):
            with b.op("_ReduceFromModelParallelRegion", fwd=True) as seq:
                seqs[tag] = seq
                with b.py(f"{MAPPINGS}(225): forward"):
                    with b.py(f"{MAPPINGS}(22): _reduce"):
                        b.collective("allreduce", "tp", nelems, nelems, phase="forward")

    def _linear(self, seqs: dict, tag: str, n: int, k: int, gather: bool) -> None:
        """The forward GEMM of a tensor-parallel linear layer: [tokens, k] @ [k, n]."""
        b, d = self.b, self.d
        with b.py(f"{TP_LAYERS}(629): linear_with_grad_accumulation_and_async_allreduce"):
            with b.op(LINEAR_FN, fwd=True) as seq:
                seqs[tag] = seq
                with b.py(f"{TP_LAYERS}(446): forward"):
                    if gather and self.cfg.sequence_parallel and self.cfg.tp > 1:
                        b.collective("allgather", "tp", d.norm_tokens * d.hidden,
                                     d.tokens * d.hidden, phase="forward")
                    with b.op("aten::matmul", shapes=shapes.matmul(d.tokens, k, n)):
                        b.gemm("aten::mm", costs.GEMM_FWD, d.tokens, k, n, phase="forward",
                               grid=(128, 1, 1), block=(384, 1, 1), regs=168, smem=213_504)

    def _column_parallel(self, module: str, seqs: dict, tag: str, n: int, k: int) -> None:
        with self.b.module(module):
            with self.b.py(f"{TP_LAYERS}(954): forward"):
                self._linear(seqs, tag, n, k, gather=True)

    def _row_parallel(self, module: str, seqs: dict, tag: str, n: int, k: int) -> None:
        with self.b.module(module):
            with self.b.py(f"{TP_LAYERS}(1245): forward"):
                self._linear(seqs, tag, n, k, gather=False)
                self._reduce_from_tp(seqs, tag + "_ar", self.d.tokens * self.d.hidden)

    def _layer_forward(self, names: LayerNames, seqs: dict, p: str) -> None:
        b, d, cfg = self.b, self.d, self.cfg
        h = d.hidden
        with b.module(names.layer):
            with b.py(f"{TL}(502): forward"):
                with b.py(f"{TL}(521): _forward_attention"):
                    with b.module(names.ln1):
                        with b.py("torch/nn/modules/normalization.py(227): forward"):
                            seqs[p + "ln1"] = b.aten("aten::layer_norm", costs.LAYERNORM_FWD,
                                                     self._ln_us(), phase="forward", fwd=True,
                                                     shapes=self._ln_shapes())
                    with b.module(names.attn):
                        with b.py("megatron/core/transformer/attention.py(875): forward"):
                            with b.py("megatron/core/transformer/attention.py(1371): "
                                      "get_query_key_value_tensors"):
                                self._column_parallel(names.qkv, seqs, p + "qkv",
                                                      3 * h // cfg.tp, h)
                            if cfg.cp > 1:
                                kv = 2 * d.tokens * d.heads * d.head_dim
                                b.collective("allgather", "cp", kv, kv * cfg.cp, phase="forward")
                            if cfg.recompute_granularity == "selective":
                                seqs[p + "attn_ckpt"] = recompute.checkpoint_forward(
                                    b, "selective",
                                    lambda: self._core_attention(names.core, {}, p))
                            else:
                                self._core_attention(names.core, seqs, p)
                            self._row_parallel(names.proj, seqs, p + "proj", h, h // cfg.tp)
                    seqs[p + "add1"] = b.aten("aten::add", costs.ADD, self._add_us(),
                                              phase="forward", fwd=True,
                                              shapes=self._add_shapes())
                with b.py(f"{TL}(573): _forward_mlp"):
                    with b.module(names.ln2):
                        with b.py("torch/nn/modules/normalization.py(227): forward"):
                            seqs[p + "ln2"] = b.aten("aten::layer_norm", costs.LAYERNORM_FWD,
                                                     self._ln_us(), phase="forward", fwd=True,
                                                     shapes=self._ln_shapes())
                    if cfg.ep > 1:
                        self._moe_forward(names, seqs, p)
                    else:
                        with b.module(names.mlp):
                            with b.py("megatron/core/transformer/mlp.py(155): forward"):
                                self._column_parallel(names.fc1, seqs, p + "fc1", d.ffn, h)
                                seqs[p + "gelu"] = b.aten(
                                    "aten::gelu", costs.GELU_FWD,
                                    costs.memory_us(d.tokens * d.ffn * costs.BF16 * 2),
                                    phase="forward", fwd=True,
                                    shapes=shapes.gelu((d.tokens, d.ffn)))
                                self._row_parallel(names.fc2, seqs, p + "fc2", h, d.ffn)
                    seqs[p + "add2"] = b.aten("aten::add", costs.ADD, self._add_us(),
                                              phase="forward", fwd=True,
                                              shapes=self._add_shapes())

    def _core_attention(self, module: str, seqs: dict, p: str) -> None:
        """``DotProductAttention``'s forward: one flash-attention kernel."""
        b, d = self.b, self.d
        with b.module(module):
            with b.py("megatron/core/transformer/dot_product_attention.py(142): forward"):
                seqs[p + "attn"] = b.aten(
                    "aten::_scaled_dot_product_flash_attention", costs.FLASH_FWD,
                    costs.attention_us(*self._attention(), False), phase="forward", fwd=True,
                    shapes=shapes.flash_attention(*self._attention_shape()),
                    flops=costs.attention_flops(*self._attention(), False),
                    grid=(d.heads, 32, 1), block=(128, 1, 1), regs=255, smem=98_304)

    def _checkpointed_forward(self, plan: ChunkPlan, seqs: dict) -> None:
        """``TransformerBlock._checkpointed_forward``, method uniform: every
        ``recompute_num_layers`` layers one checkpoint, run without autograd
        (their backward re-runs them: :meth:`backward`)."""
        step = self.cfg.recompute_num_layers
        with self.b.py(recompute.CHECKPOINTED_FORWARD):
            for start in range(0, len(plan.layers), step):
                layers = range(start, min(start + step, len(plan.layers)))

                def run(layers: range = layers) -> None:
                    for j in layers:
                        self._layer_forward(plan.layers[j], {}, f"L{j}")

                seqs[f"ckpt{start}"] = recompute.checkpoint_forward(self.b, "full", run)

    def _add_shapes(self) -> str:
        return shapes.binary((self.d.norm_tokens, self.d.hidden))

    def _attention(self) -> tuple[int, int, int, int, int]:
        """(batch, query length, key length, local heads, head dim) of the core attention."""
        d = self.d
        return d.micro_batch, d.tokens // d.micro_batch, d.seq, d.heads, d.head_dim

    def _attention_shape(self) -> tuple[int, int, int, int, int]:
        """The same as SDPA's [B, H, N, d] operands are sized: (B, H, N_q, N_kv, d)."""
        batch, q_len, kv_len, heads, head_dim = self._attention()
        return batch, heads, q_len, kv_len, head_dim

    def _moe_tokens(self) -> tuple[int, int]:
        """(routed token copies, expert width) handled by one rank's local experts."""
        cfg, d = self.cfg, self.d
        return d.tokens * 2, cfg.ffn // cfg.expert_tp  # top-2 routing, balanced

    def _moe_forward(self, names: LayerNames, seqs: dict, p: str) -> None:
        b, d, cfg = self.b, self.d, self.cfg
        h = d.hidden
        routed, width = self._moe_tokens()
        moe = "megatron/core/transformer/moe"
        with b.module(names.mlp):
            with b.py(f"{moe}/moe_layer.py(254): forward"):
                with b.module(names.router):
                    with b.py(f"{moe}/router.py(467): forward"):
                        seqs[p + "router"] = b.gemm(
                            "aten::mm", costs.GEMM_FWD, d.tokens, h, cfg.num_experts,
                            phase="forward", fwd=True)
                        b.aten("aten::topk", costs.TOPK, costs.memory_us(d.tokens * 64),
                               phase="forward")
                with b.py(f"{moe}/token_dispatcher.py(1069): token_permutation"):
                    seqs[p + "permute"] = b.aten("aten::index_select", costs.PERMUTE,
                                                 costs.memory_us(routed * h * 4),
                                                 phase="forward", fwd=True)
                    b.collective("all_to_allv", "ep", routed * h, routed * h, phase="forward")
                    if cfg.expert_tp > 1:
                        b.collective("allgather", "etp", routed * h, routed * h * cfg.expert_tp,
                                     phase="forward")
                with b.module(names.fc1):
                    with b.py(f"{moe}/experts.py(226): forward"):
                        seqs[p + "efc1"] = b.gemm("aten::mm", costs.GEMM_FWD, routed, h, width,
                                                  phase="forward", fwd=True)
                        seqs[p + "gelu"] = b.aten("aten::gelu", costs.GELU_FWD,
                                                  costs.memory_us(routed * width * 4),
                                                  phase="forward", fwd=True)
                        seqs[p + "efc2"] = b.gemm("aten::mm", costs.GEMM_FWD, routed, width, h,
                                                  phase="forward", fwd=True)
                with b.py(f"{moe}/token_dispatcher.py(1139): token_unpermutation"):
                    if cfg.expert_tp > 1:
                        b.collective("reduce_scatter", "etp", routed * h * cfg.expert_tp,
                                     routed * h, phase="forward")
                    b.collective("all_to_allv", "ep", routed * h, routed * h, phase="forward")
                    seqs[p + "unpermute"] = b.aten("aten::index_add_", costs.PERMUTE,
                                                   costs.memory_us(routed * h * 4),
                                                   phase="forward", fwd=True)

    def _cross_entropy(self, seqs: dict) -> None:
        b, d = self.b, self.d
        logits = d.tokens * d.vocab * costs.FP32
        ce = "megatron/core/tensor_parallel/cross_entropy.py"
        with b.py("megatron/core/models/common/language_module/language_module.py(128): "
                  "compute_language_model_loss"):
            with b.py(f"{ce}(219): vocab_parallel_cross_entropy"):
                with b.op("_VocabParallelCrossEntropy", fwd=True) as seq:
                    seqs["ce"] = seq
                    with b.py(f"{ce}(123): forward"):
                        b.aten("aten::max", costs.REDUCE_MAX, costs.memory_us(logits),
                               phase="forward", shapes=shapes.reduce((d.tokens, d.vocab), -1))
                        b.collective("allreduce", "tp", d.tokens, d.tokens, "Float",
                                     phase="forward")
                        b.aten("aten::exp", costs.EXP, costs.memory_us(2 * logits),
                               phase="forward",
                               shapes=shapes.unary((d.tokens, d.vocab), shapes.FP32))
                        b.collective("allreduce", "tp", d.tokens, d.tokens, "Float",
                                     phase="forward")
                        b.aten("aten::sum", costs.REDUCE_SUM, costs.memory_us(logits),
                               phase="forward", shapes=shapes.reduce((d.tokens, d.vocab), -1))
                        b.collective("allreduce", "tp", d.tokens, d.tokens, "Float",
                                     phase="forward")

    # -- backward -----------------------------------------------------------
    def backward(self, chunk: int, mb: int, on_layer_done: Callable[[str], None]) -> None:
        """The autograd thread's work for (chunk, mb): forward ops in reverse.

        ``on_layer_done(item)`` is called after each parameter group's
        gradients are ready (DDP's hooks fire there).
        """
        b, d, plan = self.b, self.d, self.plans[chunk]
        seqs = self._seqs.pop((chunk, mb))
        h = d.hidden
        if plan.has_output:
            with b.autograd_node("MulBackward0", seqs["loss"]):
                b.aten("aten::mul", costs.MUL, costs.memory_us(d.tokens * 12), AUTOGRAD,
                       phase="backward", shapes=shapes.binary((d.tokens,), shapes.FP32))
            with b.autograd_node("_VocabParallelCrossEntropyBackward", seqs["ce"]):
                with b.py("megatron/core/tensor_parallel/cross_entropy.py(154): backward",
                          AUTOGRAD):
                    b.aten("aten::mul", costs.MUL,
                           costs.memory_us(d.tokens * d.vocab * costs.FP32 * 2), AUTOGRAD,
                           phase="backward", shapes=shapes.scale((d.tokens, d.vocab)))
            self._linear_backward(seqs["output"], d.vocab, h, column=True)
            with b.autograd_node("NativeLayerNormBackward0", seqs["final_ln"]):
                self._layernorm_backward()
            on_layer_done("output")
        if self.cfg.recompute_granularity == "full":
            self._checkpointed_backward(plan, seqs, on_layer_done)
        else:
            for j in reversed(range(len(plan.layers))):
                self._layer_backward(seqs, f"L{j}", plan.layers[j])
                on_layer_done(f"layer{j}")
        if plan.has_embedding:
            if self.cfg.tp > 1:
                self._reduce_backward(seqs["embedding_ar"])
            with b.autograd_node("EmbeddingBackward0", seqs["embedding"]):
                with b.op("aten::embedding_backward", AUTOGRAD):
                    b.aten("aten::embedding_dense_backward", costs.EMBEDDING_BWD,
                           costs.memory_us(d.tokens * h * costs.FP32 * 3), AUTOGRAD,
                           phase="backward")
            on_layer_done("embedding")

    def _checkpointed_backward(self, plan: ChunkPlan, seqs: dict,
                               on_layer_done: Callable[[str], None]) -> None:
        """Each checkpoint's backward, last first: its layers' forward re-run
        (recomputation), then their backward; DDP's hooks fire inside it."""
        step = self.cfg.recompute_num_layers
        for start in reversed(range(0, len(plan.layers), step)):
            layers = range(start, min(start + step, len(plan.layers)))
            rebuilt: dict[str, int | None] = {}

            def rerun(layers: range = layers, rebuilt: dict = rebuilt) -> None:
                for j in layers:
                    self._layer_forward(plan.layers[j], rebuilt, f"L{j}")

            def backward(layers: range = layers, rebuilt: dict = rebuilt) -> None:
                for j in reversed(layers):
                    self._layer_backward(rebuilt, f"L{j}", plan.layers[j])
                    on_layer_done(f"layer{j}")

            recompute.checkpoint_backward(self.b, "full", seqs[f"ckpt{start}"], rerun, backward)

    def _layernorm_backward(self) -> None:
        b = self.b
        with b.op("aten::native_layer_norm_backward", AUTOGRAD):
            b.kernel(costs.LAYERNORM_BWD_INPUT, self._ln_us() * 1.5, AUTOGRAD, "backward")
            b.kernel(costs.LAYERNORM_BWD_WEIGHT, self._ln_us(), AUTOGRAD, "backward")

    def _reduce_backward(self, seq: int | None) -> None:
        """Backward of the row-parallel reduction: identity, or an all-gather with SP."""
        b, d = self.b, self.d
        if self.cfg.sequence_parallel:
            with b.autograd_node("_ReduceScatterToSequenceParallelRegionBackward", seq):
                b.collective("allgather", "tp", d.norm_tokens * d.hidden, d.tokens * d.hidden,
                             thread=AUTOGRAD, phase="backward", python=False)
        else:
            with b.autograd_node("_ReduceFromModelParallelRegionBackward", seq):
                b.leaf(f"{MAPPINGS}(230): backward", AUTOGRAD)

    def _linear_backward(self, seq: int | None, n: int, k: int, column: bool) -> None:
        """dgrad GEMM, async input-grad reduction (column-parallel), wgrad GEMM, wait:
        the backward of [tokens, k] @ [k, n] (grad [tokens, n] @ [n, k], then
        [n, tokens] @ [tokens, k])."""
        b, d, cfg = self.b, self.d, self.cfg
        with b.autograd_node(f"{LINEAR_FN}Backward", seq):
            with b.py(f"{TP_LAYERS}(493): backward", AUTOGRAD):
                b.gemm("aten::matmul", costs.GEMM_DGRAD, d.tokens, n, k, AUTOGRAD,
                       phase="backward", grid=(128, 1, 1), block=(384, 1, 1), regs=168,
                       smem=213_504)
                handle = None
                if column and cfg.tp > 1:
                    if cfg.sequence_parallel:
                        handle = b.collective("reduce_scatter", "tp", d.tokens * d.hidden,
                                              d.norm_tokens * d.hidden, thread=AUTOGRAD,
                                              phase="backward", blocking=False)
                    else:
                        handle = b.collective("allreduce", "tp", d.tokens * d.hidden,
                                              d.tokens * d.hidden, thread=AUTOGRAD,
                                              phase="backward", blocking=False)
                b.gemm("aten::mm", costs.GEMM_WGRAD, n, d.tokens, k, AUTOGRAD, phase="backward",
                       grid=(128, 1, 1), block=(256, 1, 1), regs=168, smem=196_608)
                b.wait(handle, AUTOGRAD)

    def _layer_backward(self, seqs: dict, p: str, names: LayerNames) -> None:
        b, d, cfg = self.b, self.d, self.cfg
        h = d.hidden
        with b.autograd_node("AddBackward0", seqs[p + "add2"]):
            pass
        if cfg.ep > 1:
            self._moe_backward(seqs, p)
        else:
            if cfg.tp > 1:
                self._reduce_backward(seqs.get(p + "fc2_ar"))
            self._linear_backward(seqs[p + "fc2"], h, d.ffn, False)
            with b.autograd_node("GeluBackward0", seqs[p + "gelu"]):
                b.aten("aten::gelu_backward", costs.GELU_BWD,
                       costs.memory_us(d.tokens * d.ffn * costs.BF16 * 3), AUTOGRAD,
                       phase="backward", shapes=shapes.gelu_backward((d.tokens, d.ffn)))
            self._linear_backward(seqs[p + "fc1"], d.ffn, h, True)
        with b.autograd_node("NativeLayerNormBackward0", seqs[p + "ln2"]):
            self._layernorm_backward()
        with b.autograd_node("AddBackward0", seqs[p + "add1"]):
            pass
        if cfg.tp > 1:
            self._reduce_backward(seqs.get(p + "proj_ar"))
        self._linear_backward(seqs[p + "proj"], h, h // cfg.tp, False)
        if cfg.recompute_granularity == "selective":
            rebuilt: dict[str, int | None] = {}
            recompute.checkpoint_backward(
                b, "selective", seqs[p + "attn_ckpt"],
                lambda: self._core_attention(names.core, rebuilt, p),
                lambda: self._core_attention_backward(rebuilt, p))
        else:
            self._core_attention_backward(seqs, p)
        if cfg.cp > 1:
            kv = 2 * d.tokens * d.heads * d.head_dim
            b.collective("reduce_scatter", "cp", kv * cfg.cp, kv, thread=AUTOGRAD,
                         phase="backward", python=False)
        self._linear_backward(seqs[p + "qkv"], 3 * h // cfg.tp, h, True)
        with b.autograd_node("NativeLayerNormBackward0", seqs[p + "ln1"]):
            self._layernorm_backward()

    def _core_attention_backward(self, seqs: dict, p: str) -> None:
        """The flash-attention backward of layer ``p``'s core attention."""
        b, d = self.b, self.d
        with b.autograd_node("ScaledDotProductFlashAttentionBackward0", seqs[p + "attn"]):
            with b.op("aten::_scaled_dot_product_flash_attention_backward", AUTOGRAD,
                      shapes=shapes.flash_attention_backward(*self._attention_shape())):
                b.kernel(costs.FLASH_BWD, costs.attention_us(*self._attention(), True),
                         AUTOGRAD, "backward", grid=(d.heads, 32, 1), block=(256, 1, 1),
                         regs=255, smem=114_688,
                         flops=costs.attention_flops(*self._attention(), True))
                b.kernel(costs.FLASH_BWD_CONVERT,
                         costs.memory_us(d.tokens * d.heads * d.head_dim * 6), AUTOGRAD,
                         "backward")

    def _moe_backward(self, seqs: dict, p: str) -> None:
        b, d, cfg = self.b, self.d, self.cfg
        h = d.hidden
        routed, width = self._moe_tokens()
        with b.autograd_node("IndexAddBackward0", seqs[p + "unpermute"]):
            b.aten("aten::index_select", costs.PERMUTE, costs.memory_us(routed * h * 4),
                   AUTOGRAD, phase="backward")
        b.collective("all_to_allv", "ep", routed * h, routed * h, thread=AUTOGRAD,
                     phase="backward", python=False)
        if cfg.expert_tp > 1:
            b.collective("allgather", "etp", routed * h, routed * h * cfg.expert_tp,
                         thread=AUTOGRAD, phase="backward", python=False)
        for tag, gemm in (("efc2", (h, width)), ("gelu", None), ("efc1", (width, h))):
            if gemm is None:
                with b.autograd_node("GeluBackward0", seqs[p + "gelu"]):
                    b.aten("aten::gelu_backward", costs.GELU_BWD,
                           costs.memory_us(routed * width * 6), AUTOGRAD, phase="backward")
                continue
            with b.autograd_node("MmBackward0", seqs[p + tag]):
                self._mm_backward(routed, *gemm)
        if cfg.expert_tp > 1:
            b.collective("reduce_scatter", "etp", routed * h * cfg.expert_tp, routed * h,
                         thread=AUTOGRAD, phase="backward", python=False)
        b.collective("all_to_allv", "ep", routed * h, routed * h, thread=AUTOGRAD,
                     phase="backward", python=False)
        with b.autograd_node("IndexSelectBackward0", seqs[p + "permute"]):
            b.aten("aten::index_add_", costs.PERMUTE, costs.memory_us(routed * h * 4),
                   AUTOGRAD, phase="backward")
        with b.autograd_node("MmBackward0", seqs[p + "router"]):
            self._mm_backward(d.tokens, cfg.num_experts, h)

    def _mm_backward(self, m: int, n: int, k: int) -> None:
        """``MmBackward0`` of [m, k] @ [k, n]: dgrad [m, n] @ [n, k], wgrad [n, m] @ [m, k]."""
        self.b.gemm("aten::mm", costs.GEMM_DGRAD, m, n, k, AUTOGRAD, phase="backward")
        self.b.gemm("aten::mm", costs.GEMM_WGRAD, n, m, k, AUTOGRAD, phase="backward")


__all__ = ["ChunkPlan", "Dims", "GPTModel", "LayerNames", "plan_chunks"]
