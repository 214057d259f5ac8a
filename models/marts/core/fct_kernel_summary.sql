{#
    One row per run x rank x kernel name: how often it ran, how much GPU
    time it took, over all iterations of the rank, and how well it used the
    GPU where it is a compute kernel whose launching op has a FLOP model
    (fct_kernels.flops: traces recorded with shapes), ratios of sums as
    fct_op_efficiency's, so that their sums over a run agree.
    A table rebuilt each time from the kernels of every loaded trace.
#}

with

kernels as (
    select
        run_id,
        rank,
        name,
        kind,
        dur_ns,
        {#- Compute kernels only, as fct_op_efficiency: a copy's bytes (flops 0)
            would otherwise lower a run's achieved TFLOP/s summed from here. #}
        case when kind = 'compute' then flops end as flops,
        case when kind = 'compute' then bytes end as bytes,
        case when kind = 'compute' and flops is not null then dur_ns end as modelled_ns
    from {{ ref('fct_kernels') }}
),

per_name as (
    select
        run_id,
        rank,
        name,
        min(kind) as kind,
        count(*) as kernel_count,
        cast(sum(dur_ns) as bigint) as total_dur_ns,
        min(dur_ns) as min_dur_ns,
        max(dur_ns) as max_dur_ns,
        cast(sum(modelled_ns) as bigint) as modelled_ns,
        sum(flops) as flops,
        sum(bytes) as bytes,
        {{ efficiency_ratios('flops', 'bytes', 'modelled_ns', 'dur_ns') }}
    from kernels
    group by 1, 2, 3
),

final as (
    select
        run_id,
        rank,
        name,
        kind,
        kernel_count,
        total_dur_ns,
        cast(total_dur_ns as double) / kernel_count as mean_dur_ns,
        min_dur_ns,
        max_dur_ns,
        cast(total_dur_ns as double)
        / nullif(sum(total_dur_ns) over (partition by run_id, rank), 0) as share_ratio,
        modelled_ns,
        flops,
        bytes,
        achieved_tflops,
        achieved_tbps,
        arithmetic_intensity,
        flop_coverage_ratio
    from per_name
)

select * from final
