{#
    One row per run x rank x kernel name: how often it ran and how much GPU
    time it took, over all iterations of the rank.
    A table rebuilt each time from the kernels of every loaded trace.
#}

with

kernels as (
    select
        run_id,
        rank,
        name,
        kind,
        dur_ns
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
        max(dur_ns) as max_dur_ns
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
        / nullif(sum(total_dur_ns) over (partition by run_id, rank), 0) as share_ratio
    from per_name
)

select * from final
