{#
    One row per run x iteration of a run with a model/batch config: how much
    of the GPUs' peak the training used, Megatron's way. Model FLOPs per
    iteration (int_model_flops_computed) over the iteration's step
    (fct_iteration_summary.step_ns: the slowest rank's step, the one step
    definition) times the world size gives Megatron's "TFLOP/s/GPU";
    divided by the dense peak of the run's GPU for the training dtype it
    is the MFU.
#}

with

iterations as (
    select
        run_id,
        iteration,
        timing_source,
        ranks,
        step_ns
    from {{ ref('fct_iteration_summary') }}
),

model_flops as (
    select
        run_id,
        params_dtype,
        model_flops_per_iteration,
        stated_flops_per_iteration
    from {{ ref('int_model_flops_computed') }}
),

{# The job's size as the traces state it (distributedInfo), else the traced ranks. #}
worlds as (
    select
        run_id,
        max(world_size) as world_size
    from {{ ref('int_traces_loaded') }}
    group by 1
),

{# The run's GPU: the product most of its traces ran on. #}
run_gpus as (
    select
        run_id,
        gpu_product,
        fp32_matrix_tflops,
        tf32_tflops,
        bf16_tflops,
        fp16_tflops,
        row_number() over (
            partition by run_id order by count(*) desc, gpu_product
        ) as gpu_order
    from {{ ref('int_trace_gpus_matched') }}
    where gpu_product is not null
    group by 1, 2, 3, 4, 5, 6
),

rated as (
    select
        iterations.run_id,
        iterations.iteration,
        iterations.timing_source,
        iterations.step_ns,
        coalesce(worlds.world_size, iterations.ranks) as world_size,
        run_gpus.gpu_product,
        model_flops.params_dtype,
        case
            when model_flops.params_dtype like '%bfloat16%' then run_gpus.bf16_tflops
            when model_flops.params_dtype like '%float16%' then run_gpus.fp16_tflops
            when model_flops.params_dtype like '%half%' then run_gpus.fp16_tflops
            when model_flops.params_dtype like '%float32%' then run_gpus.fp32_matrix_tflops
        end as peak_tflops,
        model_flops.model_flops_per_iteration,
        model_flops.stated_flops_per_iteration,
        model_flops.model_flops_per_iteration
        / nullif(
            iterations.step_ns * 1e3 * coalesce(worlds.world_size, iterations.ranks), 0
        ) as achieved_tflops_per_gpu
    from iterations
    inner join model_flops
        on iterations.run_id = model_flops.run_id
    left join worlds
        on iterations.run_id = worlds.run_id
    left join run_gpus
        on
            iterations.run_id = run_gpus.run_id
            and run_gpus.gpu_order = 1
),

final as (
    select
        *,
        achieved_tflops_per_gpu / nullif(peak_tflops, 0) as mfu
    from rated
)

select * from final
