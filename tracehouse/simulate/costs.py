"""How long things take on the simulated machine (H100 SXM nodes, NVLink + IB).

Why a roofline: the simulator's point is not to predict a real job to the
percent but to produce timings whose *shape* is right -- GEMMs dominating,
attention quadratic in sequence length, TP all-reduces in the same order as
the GEMMs around them, inter-node collectives much slower than intra-node --
so that bubbles, overlap and stragglers show the proportions a real run has.
Every figure here is a documented constant; nothing is fitted.
"""

from __future__ import annotations

# Throughputs, per microsecond.
GEMM_FLOPS_PER_US = 6.5e8  # ~650 TFLOP/s achieved on large bf16 GEMMs (peak ~989)
ATTN_FWD_FLOPS_PER_US = 4.5e8  # flash-attention forward
ATTN_BWD_FLOPS_PER_US = 3.5e8  # flash-attention backward
HBM_BYTES_PER_US = 2.8e6  # ~2.8 TB/s achieved memory bandwidth
MIN_KERNEL_US = 2.0  # even an empty kernel occupies the GPU this long

# NCCL bus bandwidth (nccl-tests "busbw") and latency.
INTRA_NODE_BUSBW = 3.6e5  # bytes/us over NVLink (360 GB/s)
INTER_NODE_BUSBW = 4.0e4  # bytes/us per GPU over InfiniBand (40 GB/s)
INTRA_NODE_P2P = 1.5e5  # bytes/us for a pipeline send/recv inside a node
INTER_NODE_P2P = 4.0e4
INTRA_NODE_LATENCY_US = 8.0
INTER_NODE_LATENCY_US = 20.0

BF16 = 2
FP32 = 4


def gemm_us(m: int, n: int, k: int) -> float:
    """A bf16 GEMM of (m x k) @ (k x n)."""
    return max(MIN_KERNEL_US, 2.0 * m * n * k / GEMM_FLOPS_PER_US)


def memory_us(nbytes: float) -> float:
    """A memory-bound kernel moving ``nbytes``."""
    return max(MIN_KERNEL_US, nbytes / HBM_BYTES_PER_US)


def attention_flops(batch: int, q_len: int, kv_len: int, heads: int, head_dim: int,
                    backward: bool) -> float:
    """FLOPs of causal flash attention over ``heads`` local heads: 2·2·q·kv·d per
    head halved by the mask; the backward 2.5x that (dQ, dK, dV and the QKᵀ
    recompute, as TraceLens and FlashAttention count it)."""
    flops = 4.0 * batch * q_len * kv_len * heads * head_dim * 0.5
    return 2.5 * flops if backward else flops


def attention_us(batch: int, q_len: int, kv_len: int, heads: int, head_dim: int,
                 backward: bool) -> float:
    """Causal flash attention over ``heads`` local heads."""
    flops = attention_flops(batch, q_len, kv_len, heads, head_dim, backward)
    rate = ATTN_BWD_FLOPS_PER_US if backward else ATTN_FWD_FLOPS_PER_US
    return max(MIN_KERNEL_US, flops / rate)


#: nccl-tests' bus-bandwidth factor: algorithm bytes = factor * buffer bytes.
def bus_factor(collective: str, group_size: int) -> float:
    """How many buffer-sizes each rank moves for ``collective`` on ``group_size`` ranks."""
    n = group_size
    if n <= 1:
        return 0.0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reduce_scatter", "all_to_allv", "_allgather_base",
                      "_reduce_scatter_base"):
        return (n - 1) / n
    return 1.0


def collective_us(collective: str, nbytes: int, group_size: int, spans_nodes: bool) -> float:
    """Transfer time of one collective once every member has arrived."""
    if group_size <= 1:
        return MIN_KERNEL_US
    bw = INTER_NODE_BUSBW if spans_nodes else INTRA_NODE_BUSBW
    lat = INTER_NODE_LATENCY_US if spans_nodes else INTRA_NODE_LATENCY_US
    return lat + bus_factor(collective, group_size) * nbytes / bw


def p2p_us(nbytes: int, same_node: bool) -> float:
    """Transfer time of a pipeline send/recv once both sides are ready."""
    bw = INTRA_NODE_P2P if same_node else INTER_NODE_P2P
    lat = INTRA_NODE_LATENCY_US if same_node else INTER_NODE_LATENCY_US
    return lat + nbytes / bw


# Kernel names as an H100 (sm90) run with cuBLAS, flash-attention and NCCL 2.21 shows them.
GEMM_FWD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
            "execute_segment_k_off_kernel__5x_cublas")
GEMM_DGRAD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_"
              "execute_segment_k_off_kernel__5x_cublas")
GEMM_WGRAD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_"
              "execute_segment_k_off_kernel__5x_cublas")
FLASH_FWD = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
             "true, false, false, false, true, true, false, false>(flash::Flash_fwd_params)")
FLASH_BWD = ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128,"
             " "
             "64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, "
             "128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false>"
             "(flash::Flash_bwd_params)")
FLASH_BWD_CONVERT = ("void flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128,"
                     " "
                     "8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, "
                     "128, 8, cutlass::bfloat16_t> >, true>(flash::Flash_bwd_params, int)")
LAYERNORM_FWD = ("void at::native::(anonymous"
                 " namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
                 "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 "
                 "const*, float*, float*, c10::BFloat16*)")
LAYERNORM_BWD_INPUT = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_"
                       "vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16"
                       " const*, "
                       "float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)")
LAYERNORM_BWD_WEIGHT = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel"
                        "Template<c10::BFloat16, float, 32u, 16u, 32u, false>(long, long, "
                        "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
                        "c10::BFloat16*, c10::BFloat16*)")
ADD = ("void at::native::vectorized_elementwise_kernel<4,"
       " at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul>)")
GELU_FWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
            "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
            "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
            "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
            "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4,"
            " at::native::GeluBackwardCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
            "{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, "
            "std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
            "{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, "
            "std::array<char*, 3ul>)")
EMBEDDING_FWD = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16,"
                 " long, "
                 "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16,"
                 " unsigned "
                 "int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
                 "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
                 "unsigned int, long)")
EMBEDDING_BWD = ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<"
                 "c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, float*, int, long,"
                 " "
                 "int, int)")
REDUCE_MAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
              "at::native::MaxOps<float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
              "at::native::MaxOps<float>, unsigned int, float, 4>)")
REDUCE_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
              "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
              "operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>"
              " >"
              "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::"
              "sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
              "{lambda(float, float)#1}>, unsigned int, float, 4>)")
EXP = ("void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda("
       "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
       "const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::exp_kernel_cuda("
       "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
       "const::{lambda(float)#1}, std::array<char*, 2ul>)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
       "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
       "at::native::BinaryFunctor<float, float, float,"
       " at::native::binary_internal::MulFunctor<float>"
       " >, std::array<char*, 3ul>)")
ADAM = ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, long>,"
        " float, "
        "float, float, float, float, float, adamMode_t, float>(long, int volatile*, "
        "TensorListMetadata<4>, AdamFunctor<float, float, long>, float, float, float, float, float,"
        " "
        "float, adamMode_t, float)")
L2NORM = ("void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float, 512, 1>, "
          "float*, float*, bool, int>(long, int volatile*, TensorListMetadata<1>, "
          "L2NormFunctor<float, 512, 1>, float*, float*, bool, int)")
SCALE = ("void multi_tensor_apply_kernel<TensorListMetadata<2>, ScaleFunctor<float, float>, float>"
         "(long, int volatile*, TensorListMetadata<2>, ScaleFunctor<float, float>, float)")
TOPK = ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::"
        "TensorInfo<float const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, "
        "unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, "
        "at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)")
PERMUTE = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
           "unsigned int, 2, 2, -2, false>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned "
           "int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
           "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
           "unsigned int, long)")
COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
        "const::{lambda()#12}::operator()()"
        " const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase"
        "&,"
        " at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
        "const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::"
        "{lambda(int)#1}>(int,"
        " at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda"
        "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() "
        "const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_"
        "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()"
        "() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})")

_NCCL_SUFFIX = "(ncclDevKernelArgsStorage<4096ul>)"
_NCCL_TYPES = {"BFloat16": "bf16", "Float": "f32", "Long": "i64", "Int": "i32", "Byte": "u8"}


def nccl_kernel(collective: str, dtype: str) -> str:
    """The NCCL 2.21 device-kernel name for a c10d collective."""
    t = _NCCL_TYPES.get(dtype, "f32")
    if collective == "allreduce":
        return f"ncclDevKernel_AllReduce_Sum_{t}_RING_LL{_NCCL_SUFFIX}"
    if collective in ("allgather", "_allgather_base", "allgather_into_tensor_coalesced"):
        return f"ncclDevKernel_AllGather_RING_LL{_NCCL_SUFFIX}"
    if collective in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        return f"ncclDevKernel_ReduceScatter_Sum_{t}_RING_LL{_NCCL_SUFFIX}"
    if collective == "broadcast":
        return f"ncclDevKernel_Broadcast_RING_LL{_NCCL_SUFFIX}"
    return f"ncclDevKernel_SendRecv{_NCCL_SUFFIX}"


#: ``nccl:<title>`` user annotation PyTorch's ProcessGroupNCCL records per collective.
NCCL_TITLE = {
    "allreduce": "nccl:all_reduce",
    "allgather": "nccl:all_gather",
    "allgather_into_tensor_coalesced": "nccl:all_gather_into_tensor_coalesced",
    "reduce_scatter": "nccl:reduce_scatter",
    "reduce_scatter_tensor_coalesced": "nccl:reduce_scatter_tensor_coalesced",
    "broadcast": "nccl:broadcast",
    "all_to_allv": "nccl:all_to_all",
    "coalesced": "nccl:coalesced",
    "send": "nccl:send",
    "recv": "nccl:recv",
}

#: The c10d op (cpu_op) in front of each collective.
C10D_OP = {
    "allreduce": "c10d::allreduce_",
    "allgather": "c10d::_allgather_base_",
    "allgather_into_tensor_coalesced": "c10d::allgather_into_tensor_coalesced_",
    "reduce_scatter": "c10d::_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced": "c10d::reduce_scatter_tensor_coalesced_",
    "broadcast": "c10d::broadcast_",
    "all_to_allv": "c10d::alltoall_base_",
    "send": "c10d::send",
    "recv": "c10d::recv_",
}
