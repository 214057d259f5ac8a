"""What ``record_shapes`` writes on a simulated CPU op: ``Input Dims``, ``Input type``,
``Concrete Inputs``.

Why: the warehouse computes FLOPs and bytes per kernel from the shapes of the
op that launched it (int_kernels_flops_attributed), and no real trace has both
shapes and a pipeline layout. With ``SimConfig.record_shapes`` the simulator
writes each transformer op's operands as PyTorch 2.x does (schema order,
``c10::BFloat16`` dtypes, scalars in ``Concrete Inputs``), sized from the
run's model config, so the FLOPs the warehouse finds can be held against the
FLOPs the cost model (:mod:`.costs`) timed. Only the ops of
:mod:`.model` carry shapes; the optimizer's and the schedule's do not.

Each function returns the args text (no braces) once per stage program; the
writer appends it to the op's args.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

BF16 = "c10::BFloat16"
FP32 = "float"


def op_shapes(inputs: Sequence[tuple[Sequence[int], str, str]]) -> str:
    """Args text for inputs given as (dims, type, concrete value) in schema order."""
    return (f'"Input Dims":{json.dumps([list(dims) for dims, _, _ in inputs])},'
            f'"Input type":{json.dumps([kind for _, kind, _ in inputs])},'
            f'"Concrete Inputs":{json.dumps([value for _, _, value in inputs])}')


def _tensor(dims: Sequence[int], dtype: str = BF16) -> tuple[Sequence[int], str, str]:
    return (dims, dtype, "")


def _scalar(kind: str, value: str) -> tuple[Sequence[int], str, str]:
    return ((), kind, value)


def mm(m: int, k: int, n: int) -> str:
    """``aten::mm(self [m, k], mat2 [k, n])``."""
    return op_shapes([_tensor((m, k)), _tensor((k, n))])


def matmul(m: int, k: int, n: int) -> str:
    """``aten::matmul(self [m, k], other [k, n])`` (2-D operands)."""
    return mm(m, k, n)


def flash_attention(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int) -> str:
    """``aten::_scaled_dot_product_flash_attention(query, key, value, dropout_p,
    is_causal, return_debug_mask, *, scale)``, causal, [B, H, N, d] operands."""
    q = _tensor((batch, heads, q_len, head_dim))
    kv = _tensor((batch, heads, kv_len, head_dim))
    return op_shapes([q, kv, kv, _scalar("Double", "0."), _scalar("Bool", "True"),
                      _scalar("Bool", "False"), _scalar("", "")])


def flash_attention_backward(batch: int, heads: int, q_len: int, kv_len: int,
                             head_dim: int) -> str:
    """``aten::_scaled_dot_product_flash_attention_backward(grad_out, query, key,
    value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    is_causal, philox_seed, philox_offset, *, scale)``, causal."""
    q = _tensor((batch, heads, q_len, head_dim))
    kv = _tensor((batch, heads, kv_len, head_dim))
    return op_shapes([
        q, q, kv, kv, q, _tensor((batch, heads, q_len), FP32), _scalar("", ""),
        _scalar("", ""), _scalar("Int", str(q_len)), _scalar("Int", str(kv_len)),
        _scalar("Double", "0."), _scalar("Bool", "True"), _tensor((), "long int"),
        _tensor((), "long int"), _scalar("", ""),
    ])


def layer_norm(tokens: int, hidden: int) -> str:
    """``aten::layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable)``."""
    return op_shapes([_tensor((tokens, hidden)), _scalar("ScalarList", f"[{hidden}]"),
                      _tensor((hidden,)), _tensor((hidden,)), _scalar("Double", "1e-05"),
                      _scalar("Bool", "True")])


def binary(dims: Sequence[int], dtype: str = BF16) -> str:
    """``aten::add(self, other, alpha)`` / ``aten::mul(self, other)`` of two equal tensors."""
    return op_shapes([_tensor(dims, dtype), _tensor(dims, dtype), _scalar("Scalar", "1")])


def unary(dims: Sequence[int], dtype: str = BF16) -> str:
    """``aten::exp(self)``: one tensor read."""
    return op_shapes([_tensor(dims, dtype)])


def gelu(dims: Sequence[int]) -> str:
    """``aten::gelu(self, approximate)``."""
    return op_shapes([_tensor(dims), _scalar("String", "none")])


def scale(dims: Sequence[int], dtype: str = FP32) -> str:
    """``aten::mul(self, other)`` by a 0-dim number."""
    return op_shapes([_tensor(dims, dtype), _scalar("Scalar", "1")])


def gelu_backward(dims: Sequence[int]) -> str:
    """``aten::gelu_backward(grad_output, self, approximate)``."""
    return op_shapes([_tensor(dims), _tensor(dims), _scalar("String", "none")])


def reduce(dims: Sequence[int], dim: int, dtype: str = FP32) -> str:
    """``aten::sum(self, dim, keepdim, dtype)`` / ``aten::max(self, dim, keepdim)``."""
    return op_shapes([_tensor(dims, dtype), _scalar("ScalarList", f"[{dim}]"),
                      _scalar("Bool", "False"), _scalar("", "")])
