{#
    One row per GPU and kernel short name of an Nsight Systems trace
    (run_id, rank, short_name): nsys-ai's top kernels (it groups by the
    short name). share_ratio = total / all kernel time of the GPU.
#}

with

kernels as (
    select
        run_id,
        rank,
        short_name,
        dur_ns
    from {{ ref('fct_nsys_kernels') }}
),

groups as (
    select
        run_id,
        rank,
        short_name,
        count(*) as kernel_count,
        cast(sum(dur_ns) as bigint) as total_dur_ns,
        avg(dur_ns) as mean_dur_ns,
        min(dur_ns) as min_dur_ns,
        max(dur_ns) as max_dur_ns
    from kernels
    group by 1, 2, 3
),

final as (
    select
        *,
        cast(total_dur_ns as double)
        / sum(total_dur_ns) over (partition by run_id, rank) as share_ratio
    from groups
)

select * from final
