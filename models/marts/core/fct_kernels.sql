{#
    One row per GPU kernel, copy or fill: run x rank x kernel. The per-trace
    kernel table with the run's lookups (vpp chunk, communication group)
    joined in, as int_kernels_placed places them (the rules live there, so
    that no intermediate model reads a mart), and its efficiency: the FLOPs
    and bytes of the CPU op that launched it (int_kernels_flops_attributed)
    against the roofs of its GPU (int_trace_gpus_matched).
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

kernels as (
    select * from {{ ref('int_kernels_placed') }}
),

flops as (
    select
        trace_id,
        slice_id,
        op_slice_id,
        op_name,
        flop_model,
        compute_dtype,
        compute_unit,
        flops,
        bytes,
        null_reason
    from {{ ref('int_kernels_flops_attributed') }}
),

gpus as (
    select
        trace_id,
        gpu_product,
        fp32_vector_tflops,
        fp32_matrix_tflops,
        tf32_tflops,
        bf16_tflops,
        fp16_tflops,
        fp8_tflops,
        hbm_tbps
    from {{ ref('int_trace_gpus_matched') }}
),

{# The kernel's work and its GPU's roofs (macros/op_flops.sql). #}
roofs as (
    select
        kernels.trace_id,
        kernels.slice_id,
        flops.op_slice_id,
        flops.op_name,
        flops.flop_model,
        flops.flops,
        flops.bytes,
        case
            when kernels.kind = 'communication' then 'communication'
            when kernels.launch_slice_id is null then 'no_launch'
            else flops.null_reason
        end as flops_null_reason,
        gpus.gpu_product,
        {{ kernel_peak_tflops(
            'gpus', 'flops.compute_unit', 'flops.compute_dtype', 'kernels.name'
        ) }} as peak_tflops,
        gpus.hbm_tbps as peak_tbps
    from kernels
    left join flops
        on
            kernels.trace_id = flops.trace_id
            and kernels.slice_id = flops.slice_id
    left join gpus
        on kernels.trace_id = gpus.trace_id
),

{# TFLOP/s = FLOPs / ns / 1e3; the roof's time is the longer of the compute
   and the memory time at peak (TraceLens' roofline). #}
rated as (
    select
        trace_id,
        slice_id,
        op_slice_id,
        op_name,
        flop_model,
        flops,
        bytes,
        flops_null_reason,
        gpu_product,
        peak_tflops,
        peak_tbps,
        flops / nullif(peak_tflops * 1e3, 0) as compute_roof_ns,
        bytes / nullif(peak_tbps * 1e3, 0) as memory_roof_ns
    from roofs
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.name,
        kernels.short_name,
        kernels.category,
        kernels.kind,
        kernels.comm_op,
        kernels.phase,
        kernels.comm_group_kind,
        kernels.comm_group_source,
        kernels.comm_process_group_kind,
        kernels.comm_group_index,
        kernels.iteration,
        kernels.microbatch,
        kernels.vpp_chunk,
        kernels.chunk_microbatch,
        kernels.is_outside_steps,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.collective_name,
        kernels.process_group_name,
        kernels.process_group_desc,
        kernels.process_group_ranks_key,
        kernels.dtype,
        kernels.group_size,
        kernels.in_msg_nelems,
        kernels.out_msg_nelems,
        kernels.launch_slice_id,
        kernels.launch_source,
        kernels.launch_name,
        kernels.annotation_slice_id,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns,
        rated.gpu_product,
        rated.op_slice_id as cpu_op_slice_id,
        rated.op_name as cpu_op_name,
        rated.flop_model,
        rated.flops,
        rated.bytes,
        rated.flops / nullif(kernels.dur_ns * 1e3, 0) as achieved_tflops,
        rated.bytes / nullif(kernels.dur_ns * 1e3, 0) as achieved_tbps,
        rated.flops / nullif(rated.bytes, 0) as arithmetic_intensity,
        rated.peak_tflops,
        rated.peak_tbps,
        case
            when rated.compute_roof_ns >= rated.memory_roof_ns then 'compute'
            when rated.compute_roof_ns < rated.memory_roof_ns then 'memory'
        end as bound,
        greatest(rated.compute_roof_ns, rated.memory_roof_ns) / nullif(kernels.dur_ns, 0)
            as roof_ratio,
        rated.flops_null_reason
    from kernels
    left join rated
        on
            kernels.trace_id = rated.trace_id
            and kernels.slice_id = rated.slice_id
)

select * from final
