"""megatron-core 0.16.1's pipeline schedules, replayed as a trace program.

Why replay the control flow instead of drawing a schedule: the reference
traces in ``../shared/data/kineto/megatron_cpu`` show every Python frame of
``schedules.py`` and ``p2p_communication.py``, and tools (TraceViz, our own
models) key on them. Walking the same branches as
``forward_backward_pipelining_without_interleaving`` (batched P2P, the
default for 1F1B) and ``forward_backward_pipelining_with_interleaving``
(``overlap_p2p_comm=True``, the default with a virtual pipeline) yields the
same frames, in the same order and nesting, and the same P2P operations and
wait points, from which the timing model derives the bubbles.

Settings mirrored (megatron-core training defaults): ``grad_sync_func`` set
(``align_grad_reduce``), ``param_sync_func`` None, ``batch_p2p_sync`` True,
``microbatch_group_size_per_vp_stage = pp``, ``deallocate_pipeline_outputs``,
no ``overlap_p2p_comm_warmup_flush``, no forward-only.

Line numbers are those of megatron-core 0.16.1.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .builder import COMM_STREAMS, P2P_STREAMS, StageBuilder
from .program import MAIN

SCHED = "megatron/core/pipeline_parallel/schedules.py"
P2PF = "megatron/core/pipeline_parallel/p2p_communication.py"
PPUTILS = "megatron/core/pipeline_parallel/utils.py"
C10D = "torch/distributed/distributed_c10d.py"

ForwardFn = Callable[[int, int], None]  # (model chunk, microbatch)
BackwardFn = Callable[[int, int, bool], None]  # (model chunk, microbatch, grad sync enabled)


class P2PCommunicator:
    """``P2PCommunicator``: recv/send helpers over ``_communicate``."""

    def __init__(self, b: StageBuilder, batched: bool, nelems: int) -> None:
        self.b = b
        self.batched = batched
        self.nelems = nelems
        b.leaf(f"{P2PF}(146): __init__")

    def _is_single_shape(self, shape_is_list_of_shapes: bool) -> None:
        with self.b.py(f"{P2PF}(130): is_single_shape"):
            # all() over a generator: resumed per element until the first False, then closed.
            for _ in range(2 if shape_is_list_of_shapes else 4):
                self.b.leaf(f"{P2PF}(134): <genexpr>")

    def _communicate(self, *, send_next: bool, send_prev: bool, recv_prev: bool,
                     recv_next: bool, wait_on_reqs: bool = True) -> dict[str, int]:
        """Emit ``_communicate``; return the P2P op index per request name."""
        b = self.b
        handles: dict[str, int] = {}
        with b.py(f"{P2PF}(254): _communicate"):
            if recv_prev:
                b.leaf(f"{P2PF}(309): create_tensor_recv_prev")
            if recv_next:
                b.leaf(f"{P2PF}(317): create_tensor_recv_next")
            if self.batched:
                with b.py(f"{P2PF}(16): _batched_p2p_ops"):
                    handles = self._batched(send_prev, recv_prev, send_next, recv_next)
            else:
                with b.py(f"{P2PF}(54): _p2p_ops"):
                    handles = self._separate(send_prev, recv_prev, send_next, recv_next)
            if wait_on_reqs and handles:
                for index in dict.fromkeys(handles.values()):
                    if self.batched:
                        with b.py(f"{C10D}(2831): wait"):
                            b.wait(index)
                    else:
                        b.wait(index)
                handles = {}
            if self.batched:
                with b.py("torch/cuda/__init__.py(1094): synchronize"):
                    b.sync(MAIN, device=True)
        return handles

    def _batched(self, send_prev: bool, recv_prev: bool, send_next: bool,
                 recv_next: bool) -> dict[str, int]:
        b = self.b
        requests = [(name, send, side) for name, send, side, wanted in (
            ("send_prev", True, "prev", send_prev), ("recv_prev", False, "prev", recv_prev),
            ("send_next", True, "next", send_next), ("recv_next", False, "next", recv_next),
        ) if wanted]
        if not requests:
            return {}
        keys = tuple(b.p2p_transfer(send, side, "a" if side == ("next" if send else "prev")
                                    else "g") for _, send, side in requests)
        sent = sum(self.nelems for _, send, _ in requests if send)
        received = sum(self.nelems for _, send, _ in requests if not send)
        index = len(b.tape.ops)
        op = b.p2p_op("coalesced", keys, sent, received, stream=COMM_STREAMS["pp"], blocking=False)
        with b.py(f"{C10D}(2990): batch_isend_irecv"):
            with b.py(f"{C10D}(2836): _coalescing_manager"):
                for _, send, _ in requests:
                    name = "isend" if send else "irecv"
                    line = 2598 if send else 2655
                    with b.py(f"{C10D}({line}): {name}"):
                        with b.op("c10d::send" if send else "c10d::recv_"):
                            b.comms_record(index, "send" if send else "recv", self.nelems)
                b.launch_comm(op)
        return {name: index for name, _, _ in requests}

    def _separate(self, send_prev: bool, recv_prev: bool, send_next: bool,
                  recv_next: bool) -> dict[str, int]:
        """``_p2p_ops``: one isend/irecv each, even/odd ordered to avoid deadlock;
        with two stages, half of them go through the WORLD group."""
        b = self.b
        even = b.stage % 2 == 0
        world_for = "recv" if even else "send"  # even_recv_odd_send_group
        order = (("send_next", True, "next", send_next), ("recv_prev", False, "prev", recv_prev),
                 ("send_prev", True, "prev", send_prev), ("recv_next", False, "next", recv_next))
        if not even:
            order = (order[1], order[0], order[3], order[2])
        handles: dict[str, int] = {}
        for name, send, side, wanted in order:
            if not wanted:
                continue
            kind = "a" if side == ("next" if send else "prev") else "g"
            key = b.p2p_transfer(send, side, kind)
            direction = "send" if send else "recv"
            group = "world" if (b.cfg.pp == 2 and direction == world_for) else "pp"
            op = b.p2p_op(direction, (key,), self.nelems if send else 0,
                          0 if send else self.nelems, stream=P2P_STREAMS[(direction, side)],
                          group=group, blocking=False)
            with b.py(f"{C10D}({2598 if send else 2655}): {'isend' if send else 'irecv'}"):
                handles[name] = b.launch_comm(op)
        return handles

    # -- the public helpers Megatron calls ----------------------------------
    def recv_forward(self, is_first_stage: bool, list_of_shapes: bool = True) -> None:
        with self.b.py(f"{P2PF}(402): recv_forward"):
            self._is_single_shape(list_of_shapes)
            if not is_first_stage:
                self._communicate(send_next=False, send_prev=False, recv_prev=True,
                                  recv_next=False)

    def recv_backward(self, is_last_stage: bool, list_of_shapes: bool = True) -> None:
        with self.b.py(f"{P2PF}(433): recv_backward"):
            self._is_single_shape(list_of_shapes)
            if not is_last_stage:
                self._communicate(send_next=False, send_prev=False, recv_prev=False,
                                  recv_next=True)

    def send_forward(self, is_last_stage: bool) -> None:
        with self.b.py(f"{P2PF}(464): send_forward"):
            if not is_last_stage:
                self._communicate(send_next=True, send_prev=False, recv_prev=False,
                                  recv_next=False)

    def send_backward(self, is_first_stage: bool) -> None:
        with self.b.py(f"{P2PF}(485): send_backward"):
            if not is_first_stage:
                self._communicate(send_next=False, send_prev=True, recv_prev=False,
                                  recv_next=False)

    def send_forward_recv_backward(self, is_last_stage: bool) -> None:
        with self.b.py(f"{P2PF}(505): send_forward_recv_backward"):
            if not is_last_stage:
                self._communicate(send_next=True, send_prev=False, recv_prev=False,
                                  recv_next=True)

    def send_backward_recv_forward(self, is_first_stage: bool) -> None:
        with self.b.py(f"{P2PF}(538): send_backward_recv_forward"):
            if not is_first_stage:
                self._communicate(send_next=False, send_prev=True, recv_prev=True,
                                  recv_next=False)

    def send_forward_recv_forward(self, send: bool, recv_prev: bool,
                                  overlap: bool = False) -> dict[str, int]:
        with self.b.py(f"{P2PF}(571): send_forward_recv_forward"):
            return self._communicate(send_next=send, send_prev=False, recv_prev=recv_prev,
                                     recv_next=False, wait_on_reqs=not overlap)

    def send_backward_recv_backward(self, send: bool, recv_next: bool,
                                    overlap: bool = False) -> dict[str, int]:
        with self.b.py(f"{P2PF}(597): send_backward_recv_backward"):
            return self._communicate(send_next=False, send_prev=send, recv_prev=False,
                                     recv_next=recv_next, wait_on_reqs=not overlap)


class _Stage:
    """Stage predicates, each emitting the utils.py frame Megatron's call leaves."""

    def __init__(self, b: StageBuilder) -> None:
        self.b = b

    def first(self) -> bool:
        self.b.leaf(f"{PPUTILS}(16): is_pp_first_stage")
        return self.b.is_first

    def last(self) -> bool:
        self.b.leaf(f"{PPUTILS}(21): is_pp_last_stage")
        return self.b.is_last

    def vp_first(self, chunk: int) -> bool:
        self.b.leaf(f"{PPUTILS}(26): is_vp_first_stage")
        return chunk == 0

    def vp_last(self, chunk: int) -> bool:
        self.b.leaf(f"{PPUTILS}(36): is_vp_last_stage")
        return chunk == self.b.cfg.vpp - 1


def one_f_one_b(b: StageBuilder, nelems: int, forward: ForwardFn, backward: BackwardFn,
                start_grad_sync: Callable[[int], None], finalize: Callable[[], None]) -> None:
    """``forward_backward_pipelining_without_interleaving`` (1F1B, batched P2P)."""
    cfg, st = b.cfg, _Stage(b)
    m = cfg.microbatches
    rank = b.stage
    with b.py(f"{SCHED}(1972): forward_backward_pipelining_without_interleaving"):
        p2p = P2PCommunicator(b, batched=True, nelems=nelems)
        st.last()
        b.leaf(f"{SCHED}(703): clear_embedding_activation_buffer")
        sync_enabled = False
        b.leaf(f"{SCHED}(2076): disable_grad_sync")
        warmup = min(cfg.pp - rank - 1, m)
        remaining = m - warmup
        b.leaf(f"{SCHED}(1946): get_tensor_shapes")
        b.leaf(f"{SCHED}(1946): get_tensor_shapes")
        fwd_mb = 0
        bwd_mb = 0

        def forward_step() -> None:
            nonlocal fwd_mb
            b.leaf(f"{SCHED}(510): check_first_val_step")
            st.last()
            forward(0, fwd_mb)
            fwd_mb += 1

        def backward_step() -> None:
            nonlocal bwd_mb
            backward(0, bwd_mb, sync_enabled)
            bwd_mb += 1

        def enable_grad_sync() -> None:
            nonlocal sync_enabled
            b.leaf(f"{SCHED}(2083): enable_grad_sync")
            sync_enabled = True

        for _ in range(warmup):
            p2p.recv_forward(st.first())
            forward_step()
            p2p.send_forward(st.last())
            b.leaf(f"{SCHED}(154): deallocate_output_tensor")
        if remaining > 0:
            p2p.recv_forward(st.first())
        for i in range(remaining):
            last_iteration = i == remaining - 1
            forward_step()
            p2p.send_forward_recv_backward(st.last())
            b.leaf(f"{SCHED}(154): deallocate_output_tensor")
            if warmup == 0 and last_iteration and rank == 0:
                enable_grad_sync()  # grad_sync_func is set: only the first stage
            backward_step()
            if last_iteration:
                p2p.send_backward(st.first())
            else:
                p2p.send_backward_recv_forward(st.first())
        for i in range(warmup):
            if i == warmup - 1 and rank == 0:
                enable_grad_sync()
            p2p.recv_backward(st.last())
            backward_step()
            p2p.send_backward(st.first())
        if not sync_enabled:
            enable_grad_sync()
            start_grad_sync(0)  # config.grad_sync_func(model.parameters())
        st.last()
        b.leaf(f"{SCHED}(722): finish_embedding_wgrad_compute")
        finalize()


def no_pipelining(b: StageBuilder, forward: ForwardFn, backward: BackwardFn,
                  finalize: Callable[[], None]) -> None:
    """``forward_backward_no_pipelining`` (pp == 1): all but the last microbatch
    under ``no_sync``; the last backward launches the gradient reduction."""
    m = b.cfg.microbatches
    with b.py(f"{SCHED}(518): forward_backward_no_pipelining"):
        for i in range(m):
            b.leaf(f"{SCHED}(510): check_first_val_step")
            forward(0, i)
            backward(0, i, i == m - 1)
        finalize()


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron's ``get_schedule_table``: (microbatch, model chunk) per virtual microbatch."""
    table = []
    for start in range(0, m, group):
        stop = m if start + group >= m else start + group
        table.extend((mb, chunk) for chunk in range(v) for mb in range(start, stop))
    return table


def interleaved(b: StageBuilder, nelems: int, forward: ForwardFn, backward: BackwardFn,
                start_grad_sync: Callable[[int], None], finalize: Callable[[], None]) -> None:
    """``forward_backward_pipelining_with_interleaving`` with ``overlap_p2p_comm``."""
    cfg, st = b.cfg, _Stage(b)
    pp, rank, v, m = cfg.pp, b.stage, cfg.vpp, cfg.microbatches
    group_size = pp  # microbatch_group_size_per_vp_stage default
    S = SCHED
    with b.py(f"{S}(828): forward_backward_pipelining_with_interleaving"):
        p2p = P2PCommunicator(b, batched=False, nelems=nelems)
        for _ in range(v + 1):  # assert all(isinstance(chunk, Module) for chunk in model)
            b.leaf(f"{S}(913): <genexpr>")
        st.last()
        b.leaf(f"{S}(703): clear_embedding_activation_buffer")
        no_sync_context = False

        def disable_grad_sync() -> None:
            nonlocal no_sync_context
            with b.py(f"{S}(962): disable_grad_sync"):
                if not no_sync_context:
                    b.leaf(f"{S}(938): multi_no_sync")
                    no_sync_context = True

        def enable_grad_sync() -> None:
            nonlocal no_sync_context
            b.leaf(f"{S}(969): enable_grad_sync")
            no_sync_context = False

        disable_grad_sync()
        synchronized: set[int] = set()
        b.leaf(f"{S}(981): <listcomp>")
        b.leaf(f"{S}(982): <listcomp>")
        b.leaf(f"{S}(988): <listcomp>")
        total = m * v
        b.leaf(f"{S}(738): get_pp_rank_microbatches")
        warmup = min((pp - rank - 1) * 2 + (v - 1) * group_size, total)
        all_warmup = warmup >= total
        remaining = total - warmup
        with b.py(f"{S}(798): get_schedule_table"):
            for start in range(0, m, group_size):
                line = 807 if start + group_size >= m else 816
                b.leaf(f"{S}({line}): <listcomp>")
        table = schedule_table(m, v, group_size)
        mb_table = [mb for mb, _ in table]
        chunk_table = [c for _, c in table]

        def get_model_chunk_id(k: int, forward_: bool) -> int:
            b.leaf(f"{S}(1079): get_model_chunk_id")
            chunk = chunk_table[k % total]
            return chunk if forward_ else v - chunk - 1

        def is_last_microbatch(k: int) -> bool:
            b.leaf(f"{S}(1113): is_last_microbatch_for_model_chunk")
            return k < total and mb_table[k] == m - 1

        def recv_tensor_from_previous_stage(k: int, forward_: bool) -> bool:
            with b.py(f"{S}(1120): recv_tensor_from_previous_stage"):
                recv = True
                leading = st.first() if forward_ else st.last()
                last_chunk = v - 1 if forward_ else 0
                if leading:
                    if k < pp - 1:
                        recv = False
                        next_chunk = get_model_chunk_id(k + 1, forward_)
                    else:
                        next_chunk = get_model_chunk_id(k - (pp - 1), forward_)
                    if next_chunk == last_chunk:
                        recv = False
                else:
                    get_model_chunk_id(k + 1, forward_)
                return recv

        bwd_mb_of_chunk = [0] * v

        def forward_step_helper(k: int) -> None:
            with b.py(f"{S}(1220): forward_step_helper"):
                chunk = get_model_chunk_id(k, True)
                b.leaf(f"{S}(1086): get_microbatch_id_in_model_chunk")
                mb = mb_table[k]
                with b.py(f"{S}(1169): forward_step_helper_preprocess"):
                    if st.vp_first(chunk):
                        st.first()
                    b.leaf(f"{S}(1092): num_released_microbatches")
                b.leaf(f"{S}(1106): is_first_microbatch_for_model_chunk")
                b.leaf(f"{S}(510): check_first_val_step")
                if st.vp_last(chunk):
                    st.last()
                forward(chunk, mb)
                b.leaf(f"{S}(1205): forward_step_helper_postprocess")

        def backward_step_helper(k: int) -> None:
            with b.py(f"{S}(1293): backward_step_helper"):
                chunk = get_model_chunk_id(k, False)
                with b.py(f"{S}(1254): backward_step_helper_preprocess"):
                    if st.vp_last(chunk):
                        st.last()
                mb = bwd_mb_of_chunk[chunk]
                bwd_mb_of_chunk[chunk] += 1
                backward(chunk, mb, False)
                with b.py(f"{S}(1273): backward_step_helper_postprocess"):
                    sync_k = k - rank
                    if sync_k >= 0 and is_last_microbatch(sync_k):
                        sync_chunk = get_model_chunk_id(sync_k, False)
                        enable_grad_sync()
                        start_grad_sync(sync_chunk)
                        synchronized.add(sync_chunk)
                    disable_grad_sync()

        def helper_wrapper(f: int | None = None, bk: int | None = None,
                           pre_forward: Callable[[], None] | None = None,
                           post_forward: Callable[[], None] | None = None,
                           pre_backward: Callable[[], None] | None = None,
                           post_backward: Callable[[], None] | None = None) -> None:
            with b.py(f"{S}(1310): forward_backward_helper_wrapper"):
                if f is not None:
                    get_model_chunk_id(f, True)
                    if pre_forward:
                        pre_forward()
                    forward_step_helper(f)
                    if post_forward:
                        post_forward()
                if bk is not None:
                    get_model_chunk_id(bk, False)
                    if pre_backward:
                        pre_backward()
                    backward_step_helper(bk)
                    if post_backward:
                        post_backward()

        # -- warmup ---------------------------------------------------------
        first_stage = st.vp_first(0) and st.first()
        p2p.recv_forward(first_stage, list_of_shapes=False)
        recv_prev_handles: list[int] = []
        recv_next_handles: list[int] = []
        send_next_handle: int | None = None
        send_prev_handle: int | None = None
        bwd_handles: dict[str, int] = {}
        for k in range(warmup):
            chunk = get_model_chunk_id(k, True)
            recv_prev = recv_tensor_from_previous_stage(k, True)
            if k == total - 1:
                recv_prev = False
            helper_wrapper(f=k)
            send = not (st.vp_last(chunk) and st.last())
            p2p.send_forward_recv_forward(send, recv_prev)
            b.leaf(f"{S}(154): deallocate_output_tensor")
            if k == warmup - 1 and not all_warmup:
                recv_next = not st.last()
                bwd_handles = p2p.send_backward_recv_backward(False, recv_next, overlap=True)
                if send_prev_handle is not None:
                    b.wait(send_prev_handle)
                send_prev_handle = bwd_handles.pop("send_prev", None)
                if "recv_next" in bwd_handles:
                    recv_next_handles.append(bwd_handles.pop("recv_next"))

        # -- steady 1F1B ----------------------------------------------------
        def pp_pre_forward(forward_k: int) -> None:
            with b.py(f"{S}(1584): pp_pre_forward"):
                chunk_ = get_model_chunk_id(forward_k, True)
                if not (st.vp_first(chunk_) and st.first()) and recv_prev_handles:
                    b.wait(recv_prev_handles.pop(0))
                b.leaf(f"{S}(154): deallocate_output_tensor")

        def pp_post_forward(forward_k: int, last: bool) -> None:
            nonlocal send_next_handle
            with b.py(f"{S}(1603): pp_post_forward"):
                chunk_ = get_model_chunk_id(forward_k, True)
                send = not (st.vp_last(chunk_) and st.last())
                recv_prev_ = recv_tensor_from_previous_stage(forward_k, True)
                if last:
                    recv_prev_ = False
                handles = p2p.send_forward_recv_forward(send, recv_prev_, overlap=True)
                if send_next_handle is not None:
                    b.wait(send_next_handle)
                send_next_handle = handles.pop("send_next", None)
                if "recv_prev" in handles:
                    recv_prev_handles.append(handles.pop("recv_prev"))

        def pp_pre_backward(backward_k: int) -> None:
            with b.py(f"{S}(1656): pp_pre_backward"):
                chunk_ = get_model_chunk_id(backward_k, False)
                if not (st.vp_last(chunk_) and st.last()) and recv_next_handles:
                    b.wait(recv_next_handles.pop(0))

        def pp_post_backward(backward_k: int) -> None:
            nonlocal send_prev_handle, bwd_handles
            with b.py(f"{S}(1674): pp_post_backward"):
                chunk_ = get_model_chunk_id(backward_k, False)
                send = not (st.vp_first(chunk_) and st.first())
                recv_next_ = recv_tensor_from_previous_stage(backward_k, False)
                bwd_handles = p2p.send_backward_recv_backward(send, recv_next_, overlap=True)
                if send_prev_handle is not None:
                    b.wait(send_prev_handle)
                send_prev_handle = bwd_handles.pop("send_prev", None)
                if "recv_next" in bwd_handles:
                    recv_next_handles.append(bwd_handles.pop("recv_next"))

        for k in range(remaining):
            forward_k = k + warmup
            get_model_chunk_id(forward_k, True)
            helper_wrapper(f=forward_k, bk=k,
                           pre_forward=partial(pp_pre_forward, forward_k),
                           post_forward=partial(pp_post_forward, forward_k, k == remaining - 1),
                           pre_backward=partial(pp_pre_backward, k),
                           post_backward=partial(pp_post_backward, k))
        b.leaf(f"{S}(154): deallocate_output_tensor")

        # -- cooldown -------------------------------------------------------
        for index in bwd_handles.values():
            b.wait(index)
        if all_warmup:
            p2p.recv_backward(st.vp_last(v - 1) and st.last(), list_of_shapes=False)
        for k in range(remaining, total):
            chunk = get_model_chunk_id(k, False)
            if not (st.vp_last(chunk) and st.last()) and k != 0 and recv_next_handles:
                b.wait(recv_next_handles.pop(0))
            recv_next = recv_tensor_from_previous_stage(k, False)
            if k == total - 1:
                recv_next = False
            helper_wrapper(bk=k)
            send = not (st.vp_first(chunk) and st.first())
            p2p.send_backward_recv_backward(send, recv_next)
        if send_prev_handle is not None:
            b.wait(send_prev_handle)
        enable_grad_sync()
        for chunk in range(v):
            if chunk not in synchronized:
                start_grad_sync(chunk)
                synchronized.add(chunk)
        st.last()
        b.leaf(f"{S}(722): finish_embedding_wgrad_compute")
        finalize()
