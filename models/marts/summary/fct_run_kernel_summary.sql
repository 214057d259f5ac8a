{#
    One row per run x kernel name: the kernel's calls, ranks and total GPU
    time over all ranks of the run (fct_kernel_summary summed), and its
    share of the run's kernel time; kind is the name's kind (the
    alphabetically first when ranks disagree). The report lists the top
    kernels from here.
    A per-run table rebuilt each time.
#}

with

per_name as (
    select
        run_id,
        name,
        min(kind) as kind,
        sum(kernel_count) as calls,
        count(distinct rank) as ranks,
        sum(total_dur_ns) as total_ns
    from {{ ref('fct_kernel_summary') }}
    group by 1, 2
),

final as (
    select
        run_id,
        name,
        kind,
        cast(calls as bigint) as calls,
        ranks,
        cast(total_ns as bigint) as total_ns,
        total_ns / nullif(sum(total_ns) over (partition by run_id), 0) as share_ratio
    from per_name
)

select * from final
