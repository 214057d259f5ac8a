"""Primitives for writing one pipeline stage's program: frames, kernels, comms.

Why: the Megatron emulation (:mod:`.schedules`, :mod:`.model`,
:mod:`.training`) reads like the Megatron code it mirrors because the
mechanics -- how a collective becomes ``c10d::allreduce_`` →
``record_param_comms`` → ``nccl:all_reduce`` → ``cudaLaunchKernelExC`` → an
NCCL kernel, how a pipeline send is matched with its receive -- live here once.

Point-to-point matching is FIFO per channel, exactly NCCL's rule: the j-th
activation (or gradient) stage s sends to stage t is the j-th one t receives
from s. Every op carries ``keys``: ``((channel, j), counterpart_stage)`` for
P2P, ``((name, j), participants)`` for collectives that span stages
(embedding group, the distributed optimizer's world group).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from . import costs
from .config import SimConfig
from .program import (
    ANNOTATION,
    AUTOGRAD,
    COLL,
    COMMS,
    CPU_OP,
    KERNEL,
    MAIN,
    MEMOP,
    P2P,
    PY,
    SYNC,
    WAIT,
    Op,
    Tape,
)
from .shapes import mm as mm_shapes

#: CUDA stream ids (Kineto shows them as the GPU track ``tid``).
COMPUTE_STREAM = 7
COMM_STREAMS = {
    "tp": 13, "cp": 17, "ep": 21, "etp": 25, "dp_cp": 29, "edp": 33, "embedding": 37,
    "intra_dist_opt": 41, "pp": 45, "world": 45,
}
#: Non-batched P2P: one stream per (direction, peer side), as PyTorch keeps one
#: communicator (and stream) per peer pair.
P2P_STREAMS = {("send", "next"): 49, ("recv", "prev"): 53, ("send", "prev"): 57,
               ("recv", "next"): 61}

#: Groups whose members all sit at one pipeline stage.
STAGE_LOCAL_GROUPS = frozenset({"tp", "cp", "ep", "etp", "dp_cp", "edp"})

TORCH_C10D = "torch/distributed/distributed_c10d.py"
#: c10d Python entry points (torch 2.13 line numbers, as in the reference traces).
C10D_PY = {
    "allreduce": f"{TORCH_C10D}(3155): all_reduce",
    "broadcast": f"{TORCH_C10D}(3085): broadcast",
    "allgather": f"{TORCH_C10D}(4398): all_gather_into_tensor",
    "reduce_scatter": f"{TORCH_C10D}(4947): reduce_scatter_tensor",
    "all_to_allv": f"{TORCH_C10D}(4628): all_to_all_single",
    "allgather_into_tensor_coalesced": f"{TORCH_C10D}(2878): _coalescing_manager",
    "reduce_scatter_tensor_coalesced": f"{TORCH_C10D}(2878): _coalescing_manager",
}


class StageBuilder:
    """Writes the program of pipeline stage ``stage`` into a :class:`Tape`."""

    def __init__(self, cfg: SimConfig, stage: int) -> None:
        self.cfg = cfg
        self.stage = stage
        self.tape = Tape()
        self.is_first = stage == 0
        self.is_last = stage == cfg.pp - 1
        self._seq = 0
        #: False inside :meth:`no_grad`: forward ops record no autograd sequence number.
        self._grad_enabled = True
        self.sent: Counter = Counter()
        self.received: Counter = Counter()
        self.rendezvous: Counter = Counter()
        self.group_sizes = {
            "tp": cfg.tp, "cp": cfg.cp, "ep": cfg.ep, "etp": cfg.expert_tp,
            "dp_cp": cfg.dp * cfg.cp, "edp": cfg.world // (cfg.expert_tp * cfg.ep * cfg.pp),
            "embedding": 2 if cfg.pp > 1 else 1, "intra_dist_opt": cfg.world, "pp": cfg.pp,
            "world": cfg.world,
        }

    # -- frames -----------------------------------------------------------
    def py(self, name: str, thread: int = MAIN) -> AbstractContextManager[None]:
        """A Python frame (``file.py(N): func``)."""
        return self.tape.frame(name, PY, thread)

    def leaf(self, name: str, thread: int = MAIN) -> None:
        """A Python frame that calls nothing we trace."""
        self.tape.leaf(name, PY, thread)

    def module(self, name: str, thread: int = MAIN) -> AbstractContextManager[None]:
        """An ``nn.Module: Name_k`` frame."""
        return self.tape.module(name, thread)

    @contextmanager
    def op(self, name: str, thread: int = MAIN, fwd: bool = False,
           bwd: int | None = None, shapes: str | None = None) -> Iterator[int | None]:
        """A ``cpu_op``. ``fwd=True`` gives it an autograd sequence number (a
        ``fwdbwd`` flow starts here; yielded); ``bwd=seq`` marks the backward
        node of that sequence number (the flow ends here); ``shapes`` is its
        ``record_shapes`` args (:mod:`.shapes`), written when the run records them."""
        extra: tuple | None = None
        seq = None
        if fwd and self._grad_enabled:
            self._seq += 1
            seq = self._seq
            extra = ("fwd", seq)
        elif bwd is not None:
            extra = ("bwd", bwd)
        self.tape.begin(name, CPU_OP, thread, extra, shapes)
        yield seq
        self.tape.end(thread)

    @contextmanager
    def no_grad(self) -> Iterator[None]:
        """``torch.no_grad()``: the forward ops inside record no autograd node
        (``CheckpointFunction.forward`` runs its function so)."""
        outer = self._grad_enabled
        self._grad_enabled = False
        try:
            yield
        finally:
            self._grad_enabled = outer

    def recomputing(self) -> AbstractContextManager[None]:
        """The forward re-run inside a checkpoint's backward (:meth:`Tape.recomputing`)."""
        return self.tape.recomputing()

    @contextmanager
    def autograd_node(self, node: str, seq: int | None) -> Iterator[None]:
        """``autograd::engine::evaluate_function: X`` → ``X`` on the autograd thread."""
        self.tape.begin(f"autograd::engine::evaluate_function: {node}", CPU_OP, AUTOGRAD,
                        ("eval", seq) if seq is not None else None)
        self.tape.begin(node, CPU_OP, AUTOGRAD, ("bwd", seq) if seq is not None else None)
        yield
        self.tape.end(AUTOGRAD)
        self.tape.end(AUTOGRAD)

    def annotation(self, name: str, thread: int = MAIN) -> AbstractContextManager[None]:
        """A ``user_annotation`` (``record_function``)."""
        return self.tape.frame(name, ANNOTATION, thread)

    # -- GPU work ---------------------------------------------------------
    def kernel(self, name: str, dur_us: float, thread: int = MAIN, phase: str = "other", *,
               grid: tuple = (132, 1, 1), block: tuple = (256, 1, 1), regs: int = 64,
               smem: int = 0, flops: float = 0.0) -> int:
        """Launch a compute kernel on the compute stream (inside the current cpu_op);
        ``flops``: the GEMM or attention FLOPs the cost model timed it for."""
        return self.tape.launch(Op(KERNEL, name=name, dur_us=dur_us, thread=thread, phase=phase,
                                   grid=grid, block=block, regs=regs, smem=smem, flops=flops))

    def aten(self, name: str, kernel: str, dur_us: float, thread: int = MAIN,
             phase: str = "other", fwd: bool = False, shapes: str | None = None,
             **launch: object) -> int | None:
        """``cpu_op name`` launching one kernel; returns the autograd seq if ``fwd``."""
        with self.op(name, thread, fwd=fwd, shapes=shapes) as seq:
            self.kernel(kernel, dur_us, thread, phase, **launch)
        return seq

    def gemm(self, name: str, kernel: str, m: int, k: int, n: int, thread: int = MAIN,
             phase: str = "other", fwd: bool = False, **launch: object) -> int | None:
        """``cpu_op name`` (``aten::mm`` or a 2-D ``aten::matmul``) computing
        [m, k] @ [k, n] in bf16: timed by the cost model (times the config's
        ``slow_gemm``), 2·m·n·k FLOPs, and those shapes."""
        dur_us = costs.gemm_us(m, n, k) * self.cfg.slow_gemm
        return self.aten(name, kernel, dur_us, thread, phase, fwd,
                         shapes=mm_shapes(m, k, n), flops=2.0 * m * n * k, **launch)

    def memop(self, name: str, nbytes: int, dur_us: float, thread: int = MAIN,
              phase: str = "other", memset: bool = False) -> int:
        """A memcpy or memset on the compute stream."""
        return self.tape.launch(Op(
            MEMOP, name=name, dur_us=dur_us, thread=thread, phase=phase,
            cat="gpu_memset" if memset else "gpu_memcpy", nbytes=nbytes,
            runtime="cudaMemsetAsync" if memset else "cudaMemcpyAsync"))

    def collective(self, coll: str, group: str, in_nelems: int, out_nelems: int,
                   dtype: str = "BFloat16", thread: int = MAIN, phase: str = "other",
                   blocking: bool = True, python: bool = True) -> int | None:
        """A c10d collective on ``group``; None (nothing emitted) if the group has one rank.

        ``blocking``: the compute stream waits for it right away (what
        ``work.wait()`` on a synchronous call does); otherwise call :meth:`wait`
        later with the returned op index.
        """
        size = self.group_sizes[group]
        if size <= 1:
            return None
        keys: tuple = ()
        if group not in STAGE_LOCAL_GROUPS:
            participants = (tuple(range(self.cfg.pp)) if group == "intra_dist_opt"
                            else (0, self.cfg.pp - 1))
            self.rendezvous[group] += 1
            keys = (((group, self.rendezvous[group]), participants),)
        elem = costs.FP32 if dtype == "Float" else (8 if dtype == "Long" else costs.BF16)
        nbytes = max(in_nelems, out_nelems) * elem
        if coll == "reduce_scatter_tensor_coalesced":
            nbytes = in_nelems * elem
        op = Op(COLL, name=costs.nccl_kernel(coll, dtype), thread=thread, phase=phase,
                stream=COMM_STREAMS[group], group=group, coll=coll, in_nelems=in_nelems,
                out_nelems=out_nelems, dtype=dtype, blocking=blocking, keys=keys,
                runtime="cudaLaunchKernelExC", grid=(min(32, 2 * size), 1, 1),
                block=(640, 1, 1), regs=96, smem=4096 * 21, nbytes=nbytes,
                annotation=costs.NCCL_TITLE.get(coll, "nccl:" + coll))
        if python and coll in C10D_PY:
            with self.py("torch/distributed/c10d_logger.py(80): wrapper", thread):
                with self.py(C10D_PY[coll], thread):
                    return self._launch_comm(op, thread)
        return self._launch_comm(op, thread)

    def _launch_comm(self, op: Op, thread: int) -> int:
        index = len(self.tape.ops)
        c10d = costs.C10D_OP.get(op.coll)  # none for a coalesced batch's closing launch
        if c10d:
            self.tape.begin(c10d, CPU_OP, thread)
        with self.tape.frame("record_param_comms", COMMS, thread, ("comms", index)):
            with self.tape.frame(op.annotation, ANNOTATION, thread):
                self.tape.runtime("cudaEventRecord", thread)
                self.tape.runtime("cudaStreamWaitEvent", thread)
                self.tape.launch(op)
                self.tape.runtime("cudaEventRecord", thread)
        if c10d:
            self.tape.end(thread)
        return index

    def wait(self, op_index: int | None, thread: int = MAIN) -> None:
        """``work.wait()``: the compute stream waits for an earlier async op."""
        if op_index is None:
            return
        op = Op(WAIT, thread=thread, wait=op_index, runtime="cudaStreamWaitEvent",
                group=self.tape.ops[op_index].group)
        with self.tape.frame("record_param_comms", COMMS, thread, ("wait", len(self.tape.ops))):
            self.tape.launch(op)

    def sync(self, thread: int = MAIN, device: bool = True) -> None:
        """The CPU waits for the GPU: ``torch.cuda.synchronize()`` (all streams)
        or a stream sync after a device-to-host copy (compute stream only)."""
        self.tape.launch(Op(SYNC, thread=thread, sync_all=device,
                            runtime="cudaDeviceSynchronize" if device
                            else "cudaStreamSynchronize"))

    # -- pipeline point-to-point -----------------------------------------
    def p2p_transfer(self, send: bool, side: str, kind: str) -> tuple:
        """The FIFO key of the next send/recv with the ``side`` ("next"/"prev") peer.

        ``kind`` is "a" (activations) or "g" (gradients): separate channels.
        """
        pp = self.cfg.pp
        peer = (self.stage + 1) % pp if side == "next" else (self.stage - 1) % pp
        src, dst = (self.stage, peer) if send else (peer, self.stage)
        channel = (kind, src, dst)
        counter = self.sent if send else self.received
        counter[channel] += 1
        return ((channel, counter[channel]), peer)

    def p2p_op(self, coll: str, keys: tuple, nelems_in: int, nelems_out: int, stream: int,
               thread: int = MAIN, group: str = "pp", blocking: bool = False) -> Op:
        """A P2P kernel (not yet launched) moving ``nelems`` bf16 values per transfer."""
        return Op(P2P, name=costs.nccl_kernel("send", "BFloat16"), thread=thread,
                  phase="pp_p2p", stream=stream, group=group, coll=coll,
                  in_nelems=nelems_in, out_nelems=nelems_out, dtype="BFloat16",
                  blocking=blocking, keys=keys, runtime="cudaLaunchKernelExC",
                  grid=(len(keys), 1, 1), block=(640, 1, 1), regs=96, smem=4096 * 21,
                  nbytes=max(nelems_in, nelems_out) * costs.BF16,
                  annotation=costs.NCCL_TITLE[coll])

    def launch_comm(self, op: Op, thread: int = MAIN) -> int:
        """Emit the c10d → record_param_comms → nccl annotation → launch chain."""
        return self._launch_comm(op, thread)

    def comms_record(self, op_index: int, coll: str, nelems: int, thread: int = MAIN) -> None:
        """A ``record_param_comms`` that launches nothing (a send/recv queued in a
        coalesced batch); it carries the args of the batch's op ``op_index``."""
        self.tape.begin("record_param_comms", COMMS, thread, ("comms_p2p", op_index, coll, nelems))
        self.tape.end(thread)
