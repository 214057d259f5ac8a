{#
    One row per GPU and CUDA stream of an Nsight Systems trace
    (run_id, rank, stream): kernel count and summed kernel time, and how
    many of them are communication kernels (nsys-ai's stream table).
#}

with

kernels as (
    select
        run_id,
        rank,
        stream,
        nsys_class,
        dur_ns
    from {{ ref('fct_nsys_kernels') }}
),

final as (
    select
        run_id,
        rank,
        stream,
        count(*) as kernel_count,
        count(*) filter (where nsys_class = 'communication') as communication_kernel_count,
        cast(sum(dur_ns) as bigint) as total_dur_ns
    from kernels
    group by 1, 2, 3
)

select * from final
