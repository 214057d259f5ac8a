{#
    One row per GPU, stream and NCCL operation of an Nsight Systems trace
    (run_id, rank, stream, op): nsys-ai's `nccl` breakdown (grouped by
    stream and op since nsys-ai 0.3.0). share_ratio is the group's share of
    all communication kernel time of the GPU.
#}

with

kernels as (
    select
        run_id,
        rank,
        stream,
        nccl_op as op,
        dur_ns
    from {{ ref('fct_nsys_kernels') }}
    where nsys_class = 'communication'
),

groups as (
    select
        run_id,
        rank,
        stream,
        op,
        count(*) as kernel_count,
        cast(sum(dur_ns) as bigint) as total_dur_ns,
        avg(dur_ns) as mean_dur_ns,
        min(dur_ns) as min_dur_ns,
        max(dur_ns) as max_dur_ns
    from kernels
    group by 1, 2, 3, 4
),

final as (
    select
        *,
        cast(total_dur_ns as double)
        / sum(total_dur_ns) over (partition by run_id, rank) as share_ratio
    from groups
)

select * from final
