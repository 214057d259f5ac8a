{#
    One row per run x pipeline stage with timings: the stage's mean
    compute and step per rank and iteration (fct_rank_iterations' rows
    with a step; compute = step_compute_ns + step_overlap_ns: GPU compute
    kernels, or forward/backward/recompute frames on CPU-timed runs), its
    step's parts as shares (ratios of sums), and how its compute compares with the other
    stages' mean (the other stages with compute above zero; NULL when
    there are none). Ranks without a known stage (dim_ranks) are left out.
    A per-run table rebuilt each time.
#}

with

per_stage as (
    select
        run_id,
        pp_stage,
        max(timing_source) as timing_source,
        count(distinct rank) as ranks,
        avg(step_compute_ns + step_overlap_ns) as compute_ns,
        avg(step_ns) as mean_step_ns,
        {{ step_part_shares() }}
    from {{ ref('fct_rank_iterations') }}
    where step_ns is not null and pp_stage is not null
    group by 1, 2
),

{# Summed in stage order, so that the double-precision total (and the
   table) is the same however the rows arrive: incremental = full refresh. #}
others as (
    select
        *,
        sum(case when compute_ns > 0 then compute_ns else 0 end)
            over (
                partition by run_id order by pp_stage
                rows between unbounded preceding and unbounded following
            )
        - case when compute_ns > 0 then compute_ns else 0 end as others_compute_total,
        sum(case when compute_ns > 0 then 1 else 0 end) over (partition by run_id)
        - case when compute_ns > 0 then 1 else 0 end as others_with_compute
    from per_stage
),

final as (
    select
        run_id,
        pp_stage,
        timing_source,
        ranks,
        compute_ns,
        mean_step_ns,
        case
            when others_with_compute > 0
                then coalesce(compute_ns, 0) / (others_compute_total / others_with_compute)
        end as compute_vs_other_stages,
        compute_share,
        overlap_share,
        exposed_communication_share,
        exposed_memory_share,
        optimizer_share,
        idle_share
    from others
)

select * from final
