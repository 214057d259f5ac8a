"""torch.distributed intercepted: each c10d op a rank issues, logged with group and call site.

The torch half of ``tracehouse commtrace`` (:mod:`.megatron_step` is the
Megatron half): a ``TorchDispatchMode`` sees every ``c10d`` op (the level
below ``torch.distributed``), so ``all_gather_into_tensor``,
``reduce_scatter_tensor`` and the coalesced calls that DDP and the
distributed optimizer issue are logged like the rest, with the group's
global ranks, dtype, element counts and the innermost Megatron call site.
``torch.cuda`` calls become meta-device answers, ``.item()`` on a meta
tensor answers a neutral value, ops without a meta kernel are answered with
a completed work object, and the P2P batch and object collectives (which
bypass the dispatcher) are wrapped. Nothing here knows Megatron beyond the
``megatron/`` frame it names as the call site.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

#: c10d op (without its overload) -> the torch.distributed name Genstack's logs use.
OP_NAMES: dict[str, str] = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce_coalesced",
    "broadcast_": "broadcast",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "allgather_coalesced_": "all_gather_coalesced",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single",
    "barrier": "barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "monitored_barrier_": "barrier",
}


_DTYPE_BYTES_FALLBACK = 1


class CaptureState:
    """Per-process logging state (one rank per process)."""

    events: list[dict[str, Any]] = []
    rank: int = 0
    batch: tuple[int, int] | None = None  # (index in the batch, batch size) while batching P2P
    batch_index: int = 0
    emulated: str | None = None  # call site of the Megatron-LM code being mirrored
    in_step: bool = False  # inside the training iteration (not set-up)


def _call_site() -> str | None:
    """Innermost ``megatron/`` frame of the Python stack, as ``megatron/...py:LINE function``."""
    if CaptureState.emulated is not None:
        return CaptureState.emulated
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        index = path.rfind("/megatron/")
        if index >= 0:
            return f"{path[index + 1:]}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return None


@contextlib.contextmanager
def emulating(site: str) -> Iterator[None]:
    """Mark the collectives issued inside as Megatron-LM code that tracehouse mirrors."""
    previous, CaptureState.emulated = CaptureState.emulated, f"{site} (emulated)"
    try:
        yield
    finally:
        CaptureState.emulated = previous


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        found = []
        for item in value:
            found.extend(_tensors(item))
        return found
    return []


def _group_of(args: tuple, kwargs: dict) -> Any:
    import torch.distributed as dist

    for value in list(args) + list(kwargs.values()):
        if type(value).__name__ == "ScriptObject":
            try:
                return dist.ProcessGroup.unbox(value)
            except (RuntimeError, TypeError):
                continue
    return None


def _log_c10d(name: str, args: tuple, kwargs: dict) -> None:
    """Append one Genstack-format record (plus tracehouse's fields) for a c10d op."""
    import torch
    import torch.distributed as dist

    op = OP_NAMES.get(name, name.rstrip("_"))
    group = _group_of(args, kwargs)
    ranks = dist.get_process_group_ranks(group) if group is not None else []
    tensors_in = _tensors(args[0]) if args else []
    tensors_out = _tensors(args[1]) if len(args) > 1 and name not in (
        "allreduce_", "broadcast_", "send", "recv_", "barrier", "allreduce_coalesced_",
        "recv_any_source_", "monitored_barrier_") else []
    if name in ("_allgather_base_", "_reduce_scatter_base_", "alltoall_base_",
                "allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_",
                "reduce_scatter_", "allgather_"):
        # Output first, input second in these schemas.
        tensors_out, tensors_in = tensors_in, tensors_out
    first = (tensors_in or tensors_out or [None])[0]
    dtype = first.dtype if first is not None else torch.float32
    size = first.element_size() if first is not None else _DTYPE_BYTES_FALLBACK
    in_nelems = sum(t.numel() for t in tensors_in)
    out_nelems = sum(t.numel() for t in tensors_out) if tensors_out else in_nelems
    record: dict[str, Any] = {"op": op, "call_id": len(CaptureState.events)}
    if name == "barrier":
        record["ranks"] = ranks
    elif name in ("send", "recv_"):
        local_peer = int(args[2])
        peer = ranks[local_peer] if local_peer < len(ranks) else local_peer
        if CaptureState.batch is not None:
            record["op"] = "batch_isend" if name == "send" else "batch_irecv"
            record["batch_idx"], record["batch_size"] = CaptureState.batch[0], CaptureState.batch[1]
            record["shape"] = list(first.shape)
            record["dtype"] = str(dtype)
            record["peer"] = peer
            CaptureState.batch = (CaptureState.batch[0] + 1, CaptureState.batch[1])
        else:
            record.update(ranks=ranks, shape=list(first.shape), dtype=str(dtype))
            record["dst" if name == "send" else "src"] = peer
            record["tag"] = int(args[3]) if len(args) > 3 else 0
        record["peer_rank"] = peer
    elif name.endswith("coalesced_"):
        # One record per tensor, as the calls inside ``_coalescing_manager`` were made
        # (and as Genstack, whose coalescing manager is a no-op, logs them).
        base = OP_NAMES[name].replace("_coalesced", "")
        reduce_op = _reduce_op(args)
        pairs = list(zip(tensors_in, tensors_out or tensors_in))
        for index, (tensor_in, tensor_out) in enumerate(pairs):
            item = {"op": base, "call_id": len(CaptureState.events), "ranks": ranks,
                    "shape": list(tensor_out.shape if tensor_out.numel() >= tensor_in.numel()
                                  else tensor_in.shape),
                    "dtype": str(tensor_in.dtype)}
            if reduce_op is not None:
                item["reduce_op"] = reduce_op
            item.update(
                src_rank=CaptureState.rank, nelems=tensor_in.numel(), out_nelems=tensor_out.numel(),
                bytes=max(tensor_in.numel(), tensor_out.numel()) * tensor_in.element_size(),
                coalesced=len(pairs), coalesced_index=index,
                group_desc=getattr(group, "group_desc", None) if group is not None else None,
                call_site=_call_site(), in_step=CaptureState.in_step)
            CaptureState.events.append(item)
        return
    else:
        record["ranks"] = ranks
        shape = list(first.shape) if first is not None else []
        if len(tensors_in) > 1 or len(tensors_out) > 1:
            record["input_shapes"] = [list(t.shape) for t in tensors_in]
            record["output_shapes"] = [list(t.shape) for t in tensors_out]
            shape = [max(in_nelems, out_nelems)]
        elif tensors_out and tensors_out[0].shape != first.shape:
            record["output_shapes"] = [list(t.shape) for t in tensors_out]
        record["shape"] = shape
        record["dtype"] = str(dtype)
        reduce_op = _reduce_op(args)
        if reduce_op is not None:
            record["reduce_op"] = reduce_op
        if name == "broadcast_" and len(args) > 2:
            root = int(args[2])
            record["src"] = ranks[root] if root < len(ranks) else root
    record["src_rank"] = CaptureState.rank
    record["nelems"] = in_nelems
    record["out_nelems"] = out_nelems
    record["bytes"] = max(in_nelems, out_nelems) * size
    record["group_desc"] = getattr(group, "group_desc", None) if group is not None else None
    record["call_site"] = _call_site()
    record["in_step"] = CaptureState.in_step
    CaptureState.events.append(record)


def _reduce_op(args: tuple) -> str | None:
    for value in args:
        if type(value).__name__ == "ScriptObject":
            try:
                import torch.distributed as dist

                return f"RedOpType.{dist.ReduceOp.unbox(value).op.name}"  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - not a ReduceOp
                continue
    return None


def install_shims() -> Any:
    """Make megatron-core's unconditional CUDA calls answer for the meta device."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.cuda.current_device = lambda: "meta"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.is_available = lambda: False  # type: ignore[assignment]
    torch.cuda.device_count = lambda: 0  # type: ignore[assignment]

    class _Stream:
        """A CUDA stream that is never used: work runs in order on the meta device."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: None

    torch.cuda.Stream = _Stream  # type: ignore[misc,assignment]
    torch.cuda.Event = _Stream  # type: ignore[misc,assignment]
    torch.cuda.current_stream = lambda *a, **k: _Stream()  # type: ignore[assignment]
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]

    def to_meta(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return "meta"
        if isinstance(value, str) and value.startswith(("cuda", "cpu")):
            return "meta"
        if isinstance(value, torch.device) and value.type in ("cuda", "cpu"):
            return torch.device("meta")
        return value

    class MetaDevices(TorchFunctionMode):
        """Rewrite ``device="cuda"`` (schedules.py hard-codes it) and ``.cuda()`` to meta."""

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = dict(kwargs or {})
            if func in (torch.Tensor.cuda, torch.Tensor.cpu):
                return args[0] if args[0].is_meta else args[0].to("meta")
            if func is torch.Tensor.type and len(args) == 1 and not kwargs and args[0].is_meta:
                # megatron-core's optimizers accept torch.cuda.*Tensor type strings only.
                name = func(*args)
                if name.startswith("torch.meta."):
                    return name.replace("torch.meta.", "torch.cuda.", 1)
                return name.replace("torch.", "torch.cuda.", 1)
            if "device" in kwargs:
                kwargs["device"] = to_meta(kwargs["device"])
            if (func is torch.Tensor.to and len(args) > 1
                    and not isinstance(args[1], (torch.dtype, torch.Tensor))):
                args = (args[0], to_meta(args[1]), *args[2:])
            return func(*args, **kwargs)

    class LogCollectives(TorchDispatchMode):
        """Log every c10d op; answer ``.item()`` on meta tensors with a neutral value."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            namespace = func.namespace
            if namespace == "c10d":
                name = func._schema.name.split("::", 1)[1]
                _log_c10d(name, args, kwargs)
                try:
                    return func(*args, **kwargs)
                except (NotImplementedError, RuntimeError):
                    return _completed(func, args)
            if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta:
                return False if args[0].dtype == torch.bool else (
                    1.0 if args[0].dtype.is_floating_point else 1)
            return func(*args, **kwargs)

    return MetaDevices(), LogCollectives()


def _completed(func: Any, args: tuple) -> Any:
    """The return value of a c10d op that has no meta kernel: a completed work object,
    after the op's first (output) tensor list when its schema returns one."""
    from torch._C._distributed_c10d import _create_work_from_future
    from torch.futures import Future

    future: Future = Future()
    future.set_result(None)
    work = _create_work_from_future(future).boxed()
    if len(func._schema.returns) == 1:
        return work
    return args[0], work


def patch_batch_p2p() -> None:
    """Label the P2P ops of ``batch_isend_irecv`` as Genstack does (batch_isend/irecv)."""
    import torch.distributed as dist

    original = dist.batch_isend_irecv
    if getattr(original, "_tracehouse", False):
        return

    def batch_isend_irecv(p2p_op_list: list) -> Any:
        CaptureState.batch = (0, len(p2p_op_list))
        try:
            return original(p2p_op_list)
        finally:
            CaptureState.batch = None

    batch_isend_irecv._tracehouse = True  # type: ignore[attr-defined]
    dist.batch_isend_irecv = batch_isend_irecv


def patch_object_collectives() -> None:
    """Object collectives pickle to CPU tensors, which meta cannot hold: log them, answer locally.

    Each rank's answer is its own object for every peer (megatron-core gathers
    parameter keys that are equal on every rank of a well-formed layout).
    """
    import pickle

    import torch.distributed as dist

    if getattr(dist.all_gather_object, "_tracehouse", False):
        return

    def record(op: str, obj: Any, group: Any) -> None:
        ranks = dist.get_process_group_ranks(group) if group is not None else list(
            range(dist.get_world_size()))
        size = len(pickle.dumps(obj))
        CaptureState.events.append({
            "op": op, "call_id": len(CaptureState.events), "ranks": ranks, "shape": [size],
            "dtype": "torch.uint8", "src_rank": CaptureState.rank, "nelems": size,
            "out_nelems": size * len(ranks), "bytes": size * len(ranks),
            "group_desc": getattr(group, "group_desc", None) if group is not None else None,
            "call_site": _call_site(), "in_step": CaptureState.in_step,
        })

    def all_gather_object(object_list: list, obj: Any, group: Any = None) -> None:
        record("all_gather_object", obj, group)
        for index in range(len(object_list)):
            object_list[index] = obj

    def broadcast_object_list(object_list: list, src: int | None = None, group: Any = None,
                              device: Any = None, group_src: int | None = None) -> None:
        record("broadcast_object_list", list(object_list), group)

    all_gather_object._tracehouse = True  # type: ignore[attr-defined]
    dist.all_gather_object = all_gather_object
    dist.broadcast_object_list = broadcast_object_list

