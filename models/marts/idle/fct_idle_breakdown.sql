{#
    One row per run x rank x device x stream x idle_category (host_wait,
    kernel_wait, other): how long the stream sat idle between its kernels,
    and why, as Holistic Trace Analysis' get_idle_time_breakdown defines it
    (int_stream_idle_categorized holds the rule). Summed over the rank's
    traces. idle_ratio = the category's share of the stream's idle time
    (HTA's idle_time_ratio).
#}

with

gaps as (
    select
        run_id,
        rank,
        device,
        stream,
        idle_category,
        gap_count,
        idle_ns
    from {{ ref('int_stream_idle_categorized') }}
),

summed as (
    select
        run_id,
        rank,
        device,
        stream,
        idle_category,
        cast(sum(gap_count) as bigint) as gap_count,
        cast(sum(idle_ns) as bigint) as idle_ns
    from gaps
    group by 1, 2, 3, 4, 5
),

final as (
    select
        run_id,
        rank,
        device,
        stream,
        idle_category,
        gap_count,
        idle_ns,
        case
            when sum(idle_ns) over (partition by run_id, rank, device, stream) > 0
                then
                    cast(idle_ns as double)
                    / sum(idle_ns) over (partition by run_id, rank, device, stream)
            else 0.0
        end as idle_ratio
    from summed
)

select * from final
