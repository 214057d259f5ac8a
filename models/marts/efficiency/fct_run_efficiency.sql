{#
    One row per run with a model/batch config: the run's MFU, for the
    report's headline. Ratios of sums over the run's iterations
    (fct_iteration_efficiency), never a mean of per-iteration ratios: the
    model FLOPs of every iteration over the sum of their steps x the world
    size is the run's achieved TFLOP/s per GPU, over its GPU's peak the MFU.
#}

with

iterations as (
    select
        run_id,
        iteration,
        step_ns,
        world_size,
        gpu_product,
        params_dtype,
        peak_tflops,
        model_flops_per_iteration
    from {{ ref('fct_iteration_efficiency') }}
),

rated as (
    select
        run_id,
        count(*) as iterations,
        max(world_size) as world_size,
        max(gpu_product) as gpu_product,
        max(params_dtype) as params_dtype,
        max(peak_tflops) as peak_tflops,
        sum(model_flops_per_iteration) as model_flops,
        cast(sum(step_ns) as bigint) as step_ns,
        {{ share_of_sums('model_flops_per_iteration', 'step_ns * 1e3 * world_size') }}
            as achieved_tflops_per_gpu
    from iterations
    group by 1
),

final as (
    select
        *,
        achieved_tflops_per_gpu / nullif(peak_tflops, 0) as mfu
    from rated
)

select * from final
