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

{# Each kernel with its op's work and its GPU's roofs (macros/op_flops.sql),
   in one pass over the kernels. int_kernels_flops_attributed holds the
   launched kernels of the traces recorded with shapes only: a launched
   kernel without a row there is one of a trace without shapes. #}
roofs as (
    select
        kernels.*,
        flops.op_slice_id,
        flops.op_name,
        flops.flop_model,
        flops.flops,
        flops.bytes,
        case
            when kernels.kind = 'communication' then 'communication'
            when kernels.launch_slice_id is null then 'no_launch'
            when flops.slice_id is null then 'no_shapes'
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
        *,
        flops / nullif(peak_tflops * 1e3, 0) as compute_roof_ns,
        bytes / nullif(peak_tbps * 1e3, 0) as memory_roof_ns
    from roofs
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        short_name,
        category,
        kind,
        comm_op,
        phase,
        comm_group_kind,
        comm_group_source,
        comm_process_group_kind,
        comm_group_index,
        iteration,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        is_outside_steps,
        device,
        stream,
        correlation,
        collective_name,
        process_group_name,
        process_group_desc,
        process_group_ranks_key,
        dtype,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        launch_slice_id,
        launch_source,
        launch_name,
        annotation_slice_id,
        ts_ns,
        dur_ns,
        end_ns,
        gpu_product,
        op_slice_id as cpu_op_slice_id,
        op_name as cpu_op_name,
        flop_model,
        flops,
        bytes,
        flops / nullif(dur_ns * 1e3, 0) as achieved_tflops,
        bytes / nullif(dur_ns * 1e3, 0) as achieved_tbps,
        flops / nullif(bytes, 0) as arithmetic_intensity,
        peak_tflops,
        peak_tbps,
        case
            when compute_roof_ns >= memory_roof_ns then 'compute'
            when compute_roof_ns < memory_roof_ns then 'memory'
        end as bound,
        greatest(compute_roof_ns, memory_roof_ns) / nullif(dur_ns, 0) as roof_ratio,
        flops_null_reason
    from rated
)

select * from final
