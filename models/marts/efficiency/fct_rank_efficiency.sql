{#
    One row per run x rank x iteration: how well the rank's compute kernels
    used the GPU in the iteration, fct_op_efficiency's rows summed over
    ops and the ratios taken of the sums (FLOPs over the time of the
    kernels that have a FLOP model; the share of compute time that has
    one). Traces recorded with shapes only, as fct_op_efficiency. A
    pipeline stage's figure is the ratio of these rows' sums by pp_stage.
#}

with

ops as (
    select
        run_id,
        rank,
        iteration,
        pp_stage,
        gpu_product,
        kernels,
        compute_ns,
        modelled_ns,
        flops,
        bytes
    from {{ ref('fct_op_efficiency') }}
),

final as (
    select
        run_id,
        rank,
        iteration,
        max(pp_stage) as pp_stage,
        max(gpu_product) as gpu_product,
        cast(sum(kernels) as bigint) as kernels,
        cast(sum(compute_ns) as bigint) as compute_ns,
        cast(sum(modelled_ns) as bigint) as modelled_ns,
        sum(flops) as flops,
        sum(bytes) as bytes,
        {{ efficiency_ratios('flops', 'bytes', 'modelled_ns', 'compute_ns') }}
    from ops
    group by 1, 2, 3
)

select * from final
