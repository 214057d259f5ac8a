"""Megatron-LM's activation recomputation (``tensor_parallel.checkpoint``), as a trace shows it.

Why its own module: both granularities go through the same
``CheckpointFunction`` (megatron/core/tensor_parallel/random.py), and a real
trace carries its frames: the forward runs the checkpointed function under
``torch.no_grad()`` inside ``CheckpointFunction.forward`` (main thread, no
autograd node per op, one for ``CheckpointFunction`` itself); its backward
node, on the autograd thread, re-runs the function's ``custom_forward`` with
grad enabled and then calls ``torch.autograd.backward`` on what it rebuilt
(a re-entrant backward on the same thread). The warehouse knows the re-run
by its ``custom_forward`` frame inside a backward (seed
megatron_step_patterns). Line numbers are megatron-core 0.15.0's.

``full`` (``--recompute-granularity full --recompute-method uniform``)
checkpoints every ``recompute_num_layers`` transformer layers in
``TransformerBlock._checkpointed_forward``; ``selective`` checkpoints the
core attention alone (``Attention._checkpointed_attention_forward``).
"""

from __future__ import annotations

from collections.abc import Callable

from .builder import StageBuilder
from .program import AUTOGRAD

RANDOM = "megatron/core/tensor_parallel/random.py"
BLOCK = "megatron/core/transformer/transformer_block.py"
ATTENTION = "megatron/core/transformer/attention.py"
#: ``Function.apply``: the Python frame around an autograd Function's cpu_op.
APPLY = "torch/autograd/function.py(575): apply"
#: The re-entrant ``torch.autograd.backward`` inside ``CheckpointFunction.backward``.
AUTOGRAD_BACKWARD = "torch/autograd/__init__.py(347): backward"
#: ``TransformerBlock._checkpointed_forward``: the full granularity's loop over checkpoints.
CHECKPOINTED_FORWARD = f"{BLOCK}(389): _checkpointed_forward"
#: (caller frames, custom_forward frame) of one checkpoint of each granularity.
SITES = {
    "full": ((f"{BLOCK}(440): checkpoint_handler",), f"{BLOCK}(403): custom_forward"),
    "selective": ((f"{ATTENTION}(219): _checkpointed_attention_forward",),
                  f"{ATTENTION}(232): custom_forward"),
}


def checkpoint_forward(b: StageBuilder, granularity: str, run: Callable[[], None],
                       ) -> int | None:
    """``tensor_parallel.checkpoint(custom_forward, ...)`` in the forward: ``run``
    (the checkpointed forward code) under ``torch.no_grad()``; returns the
    autograd sequence number of ``CheckpointFunction``, which its backward
    node closes."""
    callers, custom_forward = SITES[granularity]
    for name in callers:
        b.tape.begin(name)
    with b.py(f"{RANDOM}(477): checkpoint"):
        with b.py(APPLY):
            with b.op("CheckpointFunction", fwd=True) as seq:
                with b.py(f"{RANDOM}(417): forward"):
                    with b.no_grad():
                        with b.py(custom_forward):
                            run()
    for _ in callers:
        b.tape.end()
    return seq


def checkpoint_backward(b: StageBuilder, granularity: str, seq: int | None,
                        rerun: Callable[[], None], backward: Callable[[], None]) -> None:
    """``CheckpointFunctionBackward`` on the autograd thread: ``rerun`` (the
    forward code again, as recomputation) inside ``custom_forward``, then
    ``backward`` (the re-run ops' backward) inside ``torch.autograd.backward``."""
    _callers, custom_forward = SITES[granularity]
    with b.autograd_node("CheckpointFunctionBackward", seq):
        with b.py(f"{RANDOM}(443): backward", AUTOGRAD):
            with b.recomputing():
                with b.py(custom_forward):
                    rerun()
            with b.py(AUTOGRAD_BACKWARD, AUTOGRAD):
                backward()


__all__ = ["CHECKPOINTED_FORWARD", "SITES", "checkpoint_backward", "checkpoint_forward"]
