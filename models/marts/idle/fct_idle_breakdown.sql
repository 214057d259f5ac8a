{#
    One row per run x rank x device x stream x idle_category (host_wait,
    kernel_wait, other): how long the stream sat idle between its kernels,
    and why, as Holistic Trace Analysis' get_idle_time_breakdown defines it
    (int_stream_idle_categorized holds the rule). Summed over the rank's
    traces. idle_ratio = the category's share of the stream's idle time
    (HTA's idle_time_ratio). Stream idle, summed per stream: not the rank
    idle of fct_rank_iterations.step_idle_ns. The rank's coordinates come
    from dim_ranks (macro rank_coordinates).
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization):
    a per-run lookup joined into an intermediate table costs less at read
    time than writing the table again on every build.
#}

{{ config(materialized=lookup_join_materialization()) }}

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

ratios as (
    select
        *,
        case
            when sum(idle_ns) over (partition by run_id, rank, device, stream) > 0
                then
                    cast(idle_ns as double)
                    / sum(idle_ns) over (partition by run_id, rank, device, stream)
            else 0.0
        end as idle_ratio
    from summed
),

ranks as (
    select * from {{ ref('dim_ranks') }}  -- noqa: AM04
),

final as (
    select
        ratios.run_id,
        ratios.rank,
        {{ rank_coordinates('ranks') }},
        ratios.device,
        ratios.stream,
        ratios.idle_category,
        ratios.gap_count,
        ratios.idle_ns,
        ratios.idle_ratio
    from ratios
    left join ranks
        on
            ratios.run_id = ranks.run_id
            and ratios.rank = ranks.rank
)

select * from final
