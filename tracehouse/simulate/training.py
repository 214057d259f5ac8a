"""One Megatron ``train_step`` per pipeline stage: the program every rank runs.

Why here: everything around the pipeline schedule -- zeroing the gradient
buffers, the data-parallel gradient buckets and when their reduce-scatters
start (DDP hooks during the last backward on the first stage, Megatron's
``grad_sync_func`` elsewhere), ``finalize_model_grads`` (waiting for them,
the embedding all-reduce between first and last stage) and the distributed
optimizer (grad-norm all-reduce over all ranks, Adam, parameter all-gather)
-- determines how iterations end and where data-parallel peers wait for each
other. The frames carry megatron-core 0.16.1's file names and line numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from . import costs, schedules
from .builder import StageBuilder
from .config import SimConfig
from .model import ChunkPlan, GPTModel
from .program import ANNOTATION, AUTOGRAD, MAIN, Tape

DDP = "megatron/core/distributed/distributed_data_parallel.py"
PGB = "megatron/core/distributed/param_and_grad_buffer.py"
FMG = "megatron/core/distributed/finalize_model_grads.py"
OPT = "megatron/core/optimizer/optimizer.py"
DOPT = "megatron/core/optimizer/distrib_optimizer.py"
CLIP = "megatron/core/optimizer/clip_grads.py"
SCHED = schedules.SCHED
#: Megatron DDP's default bucket size (parameters), at least 1M per data-parallel rank.
BUCKET_PARAMS = 40_000_000


@dataclass
class Bucket:
    """A gradient bucket: items in backward order, its size and its group."""

    items: list[str]
    numel: int
    group: str  # "dp_cp" (dense) or "edp" (expert)


def plan_buckets(cfg: SimConfig, plan: ChunkPlan) -> list[Bucket]:
    """Megatron-style buckets: parameters in backward order, closed at the bucket size."""
    size = max(BUCKET_PARAMS, 1_000_000 * cfg.dp * cfg.cp)
    buckets: list[Bucket] = []
    for group, params in (("dp_cp", plan.params), ("edp", plan.expert_params)):
        current: list[str] = []
        numel = 0
        for item, n in reversed(params):
            current.append(item)
            numel += n
            if numel >= size:
                buckets.append(Bucket(current, numel, group))
                current, numel = [], 0
        if current:
            buckets.append(Bucket(current, numel, group))
    return buckets


@dataclass
class StageProgram:
    """The sealed program of one pipeline stage and its P2P traffic counts."""

    stage: int
    tape: Tape
    sent: dict
    received: dict
    rendezvous: dict


class TrainStep:
    """Builds ``train_step`` for one stage on a :class:`StageBuilder`."""

    def __init__(self, b: StageBuilder) -> None:
        self.b = b
        self.cfg = b.cfg
        self.model = GPTModel(b)
        self.buckets = [plan_buckets(self.cfg, plan) for plan in self.model.plans]
        self.launched: dict[tuple[int, int], int | None] = {}

    # -- data-parallel gradient reduction ------------------------------------
    def _reduce_scatter(self, chunk: int, index: int, thread: int,
                        blocking: bool = False) -> None:
        bucket = self.buckets[chunk][index]
        size = self.b.group_sizes[bucket.group]
        with self.b.py(f"{PGB}(364): start_grad_sync", thread):
            self.launched[(chunk, index)] = self.b.collective(
                "reduce_scatter_tensor_coalesced", bucket.group, bucket.numel,
                bucket.numel // max(size, 1), "Float", thread=thread, phase="dp_sync",
                blocking=blocking, python=False)

    def grad_sync_func(self) -> Callable[[int], None]:
        """What the schedules get as Megatron's ``config.grad_sync_func``: set
        only with ``overlap_grad_reduce`` (megatron/training/training.py);
        without it the schedules launch nothing and ``finalize`` reduces."""
        if self.cfg.overlap_grad_reduce:
            return self.start_grad_sync
        return lambda chunk: None

    def start_grad_sync(self, chunk: int) -> None:
        """``DistributedDataParallel.start_grad_sync`` (Megatron's ``grad_sync_func``)."""
        with self.b.py(f"{DDP}(513): start_grad_sync"):
            for index in range(len(self.buckets[chunk])):
                if (chunk, index) not in self.launched:
                    self._reduce_scatter(chunk, index, MAIN)

    def _hook(self, chunk: int, sync: bool) -> Callable[[str], None]:
        """DDP's per-parameter hook, fired as each parameter group's grads land."""
        done: set[str] = set()

        def on_layer_done(item: str) -> None:
            done.add(item)
            with self.b.py(f"{DDP}(427): hook", AUTOGRAD):
                if not self.cfg.overlap_grad_reduce:
                    return  # the hook only accumulates: no bucket is ever ready early
                with self.b.py(f"{PGB}(539): register_grad_ready", AUTOGRAD):
                    if not sync:
                        return
                    for index, bucket in enumerate(self.buckets[chunk]):
                        if (chunk, index) in self.launched:
                            continue
                        if all(item_ in done for item_ in bucket.items):
                            self._reduce_scatter(chunk, index, AUTOGRAD)

        return on_layer_done

    # -- one microbatch -------------------------------------------------------
    def forward_step(self, chunk: int, mb: int) -> None:
        """``schedules.forward_step`` around ``pretrain_gpt.forward_step``."""
        b, plan = self.b, self.model.plans[chunk]
        first = len(b.tape.ops)
        with b.py(f"{SCHED}(311): forward_step"):
            b.leaf(f"{SCHED}(200): set_current_microbatch")
            b.leaf("megatron/core/utils.py(563): get_attr_wrapped_model")
            with b.py("megatron/core/models/gpt/gpt_model.py(268): set_input_tensor"):
                b.leaf("megatron/core/transformer/transformer_block.py(570): set_input_tensor")
            with b.py("pretrain_gpt.py(166): forward_step"):
                with b.py("pretrain_gpt.py(65): get_batch"):
                    if plan.has_embedding or plan.has_output:
                        self._get_batch()
                self.model.forward(chunk, mb)
            with b.py(f"{SCHED}(218): forward_step_calc_loss"):
                if plan.has_output:
                    self.model.loss_func(chunk, mb)
        b.tape.passes.append(("forward", chunk, mb, first, len(b.tape.ops)))

    def _get_batch(self) -> None:
        b, d = self.b, self.model.d
        nbytes = d.tokens * 8 * 4  # tokens, labels, loss mask, position ids (int64)
        with b.op("aten::to"):
            with b.op("aten::copy_"):
                b.memop("Memcpy HtoD (Pinned -> Device)", nbytes, max(2.0, nbytes / 2.5e4),
                        phase="forward")
        b.collective("broadcast", "tp", d.tokens * 4, d.tokens * 4, "Long", phase="forward")

    def backward_step(self, chunk: int, mb: int, sync: bool) -> None:
        """``schedules.backward_step`` → ``custom_backward`` → the autograd thread."""
        b, plan = self.b, self.model.plans[chunk]
        first = len(b.tape.ops)
        with b.py(f"{SCHED}(446): backward_step"):
            with b.py(f"{SCHED}(168): custom_backward"):
                if plan.has_output:
                    b.aten("aten::ones_like", costs.ADD, costs.MIN_KERNEL_US, phase="backward")
                with b.py("<built-in method run_backward of torch._C._EngineBase object at "
                          "0x7f3c5a2e1d40>"):
                    self.model.backward(chunk, mb, self._hook(chunk, sync))
        b.tape.passes.append(("backward", chunk, mb, first, len(b.tape.ops)))

    # -- around the schedule ----------------------------------------------------
    def zero_grad(self) -> None:
        b = self.b
        for buckets in self.buckets:
            with b.py(f"{DDP}(542): zero_grad_buffer"):
                for group in ("dp_cp", "edp"):
                    numel = sum(bk.numel for bk in buckets if bk.group == group)
                    if not numel:
                        continue
                    with b.py(f"{PGB}(958): reset"):
                        with b.op("aten::zero_"):
                            with b.op("aten::fill_"):
                                b.memop("Memset (Device)", numel * 4,
                                        costs.memory_us(numel * 4), phase="other", memset=True)
        with b.py(f"{OPT}(1133): zero_grad"):
            b.leaf(f"{DOPT}(2269): zero_grad")

    def finalize(self) -> None:
        """``finalize_model_grads``: wait for the reduce-scatters, embedding all-reduce."""
        b, cfg = self.b, self.cfg
        with b.py(f"{FMG}(396): finalize_model_grads"):
            for chunk, buckets in enumerate(self.buckets):
                with b.py(f"{DDP}(525): finish_grad_sync"):
                    for index in range(len(buckets)):
                        with b.py(f"{PGB}(507): finish_grad_sync"):
                            if not cfg.overlap_grad_reduce:
                                # param_and_grad_buffer.finish_grad_sync: no overlap, so
                                # reduce now, synchronously, after the whole backward.
                                self._reduce_scatter(chunk, index, MAIN, blocking=True)
                                continue
                            # Megatron asserts the overlapped reduction was issued by now.
                            assert (chunk, index) in self.launched, (chunk, index)
                            b.wait(self.launched[(chunk, index)])
            b.leaf(f"{FMG}(89): _allreduce_conditional_embedding_grads")
            with b.py(f"{FMG}(318): _allreduce_non_tensor_model_parallel_grads"):
                if cfg.sequence_parallel:
                    n = 4 * cfg.hidden * cfg.layers_per_chunk * cfg.vpp
                    b.collective("allreduce", "tp", n, n, "Float", phase="dp_sync")
            with b.py(f"{FMG}(164): _allreduce_word_embedding_grads"):
                if cfg.pp > 1 and (b.is_first or b.is_last):
                    with b.py(f"{FMG}(204): _allreduce_embedding_grad"):
                        n = cfg.vocab // cfg.tp * cfg.hidden
                        b.collective("allreduce", "embedding", n, n, "Float", phase="dp_sync")
            with b.py(f"{FMG}(262): _allreduce_position_embedding_grads"):
                if b.is_first:
                    b.leaf(f"{FMG}(204): _allreduce_embedding_grad")
            b.leaf(f"{FMG}(278): reset_model_temporary_tensors")

    def optimizer_step(self) -> None:
        """The distributed optimizer's ``step``: grad norm, clip, Adam, param all-gather."""
        b = self.b
        shard = sum(bk.numel // b.group_sizes[bk.group] for bks in self.buckets for bk in bks)
        with b.py(f"{OPT}(1307): step"):
            with b.py(f"{OPT}(1232): prepare_grads"):
                with b.py(f"{OPT}(523): prepare_grads"):
                    b.leaf(f"{DOPT}(2386): _copy_model_grads_to_main_grads")
            with b.py(f"{OPT}(1269): get_grad_norm"):
                with b.py(f"{OPT}(194): get_grad_norm"):
                    with b.py(f"{CLIP}(51): get_grad_norm_fp32"):
                        b.aten("aten::_foreach_norm", costs.L2NORM,
                               costs.memory_us(shard * costs.FP32), phase="optimizer")
                        b.collective("allreduce", "intra_dist_opt", 1, 1, "Float",
                                     phase="optimizer")
                        with b.op("aten::item"):
                            with b.op("aten::_local_scalar_dense"):
                                b.memop("Memcpy DtoH (Device -> Pageable)", 4, 2.0,
                                        phase="optimizer")
                                b.sync(MAIN, device=False)
            with b.py(f"{CLIP}(138): clip_grad_by_total_norm_fp32"):
                b.aten("aten::_foreach_mul_", costs.SCALE, costs.memory_us(shard * 8),
                       phase="optimizer")
            with b.py(f"{OPT}(1241): step_with_ready_grads"):
                with b.py(f"{DOPT}(2597): step_with_ready_grads"):
                    with b.py(f"{OPT}(559): step_with_ready_grads"):
                        with b.annotation("Optimizer.step#FusedAdam.step"):
                            with b.py("transformer_engine/pytorch/optimizers/fused_adam.py(571): "
                                      "step"):
                                b.aten("multi_tensor_adam", costs.ADAM,
                                       costs.memory_us(shard * 32), phase="optimizer")
                    with b.py(f"{DOPT}(2429): _copy_main_params_to_model_params"):
                        b.aten("aten::copy_", costs.COPY, costs.memory_us(shard * 6),
                               phase="optimizer")
                    for buckets in self.buckets:
                        with b.py(f"{DDP}(463): start_param_sync"):
                            for bucket in buckets:
                                with b.py(f"{PGB}(250): start_param_sync"):
                                    size = b.group_sizes[bucket.group]
                                    op = b.collective(
                                        "allgather_into_tensor_coalesced", bucket.group,
                                        bucket.numel // max(size, 1), bucket.numel,
                                        phase="optimizer", blocking=False, python=False)
                                    b.wait(op)

    def build(self) -> None:
        """The whole iteration: outer frames, ProfilerStep#N, train_step, logging."""
        b, cfg = self.b, self.cfg
        with b.py("pretrain_gpt.py(346): <module>"):
            with b.py("megatron/training/training.py(702): pretrain"):
                with b.py("megatron/training/training.py(2417): train"):
                    b.tape.begin("ProfilerStep#", ANNOTATION, MAIN, ("step",))
                    with b.py("megatron/training/training.py(1603): train_step"):
                        self.zero_grad()
                        nelems = self.model.d.activation_nelems
                        fwd, bwd = self.forward_step, self.backward_step
                        if cfg.pp == 1:
                            schedules.no_pipelining(b, fwd, bwd, self.finalize)
                        elif cfg.vpp > 1:
                            schedules.interleaved(b, nelems, fwd, bwd, self.grad_sync_func(),
                                                  self.finalize)
                        else:
                            schedules.one_f_one_b(b, nelems, fwd, bwd, self.grad_sync_func(),
                                                  self.finalize)
                        self.optimizer_step()
                    b.leaf("megatron/training/training.py(1773): training_log")
                    b.tape.end(MAIN)


@lru_cache(maxsize=64)
def stage_program(cfg: SimConfig, stage: int) -> StageProgram:
    """The (cached) program of pipeline stage ``stage`` under ``cfg``."""
    b = StageBuilder(cfg, stage)
    TrainStep(b).build()
    return StageProgram(stage=stage, tape=b.tape.finish(), sent=dict(b.sent),
                        received=dict(b.received), rendezvous=dict(b.rendezvous))


def check_p2p_balance(programs: list[StageProgram]) -> None:
    """Every channel carries as many sends as receives (else the schedule would hang)."""
    sent: dict = {}
    received: dict = {}
    for program in programs:
        sent.update(program.sent)
        received.update(program.received)
    if sent != received:
        diff = {k: (sent.get(k, 0), received.get(k, 0)) for k in set(sent) | set(received)
                if sent.get(k, 0) != received.get(k, 0)}
        raise AssertionError(f"pipeline sends and receives do not match: {diff}")
