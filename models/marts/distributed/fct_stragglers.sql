{#
    One row per run x iteration x rank taking part in matched collectives:
    how much that rank held the others back (wait_caused_ns, summed over
    its collectives and P2P transfers, attribution by arrival order as in
    int_collective_members_aligned), how often it arrived last, how long it
    waited itself (a victim's time, not counted against it), and its
    compute against its pipeline stage's median: its GPU compute kernels'
    busy time, or on a rank without GPU kernels (a CPU-only run, timing
    source cpu) its forward and backward step frames' busy time
    (int_stage_work_merged), the same timings its waits come from.
    straggler_rank 1 is the rank that holds the job back most in the
    iteration (most waiting caused, then most times last, then lowest
    rank), so "which rank holds the job back" is
    `select * from fct_stragglers where straggler_rank = 1`; "straggler"
    means that rank everywhere (report, compare, summaries). A rank that
    caused no waiting is nobody's straggler: straggler_rank is NULL, so an
    iteration without cross-rank waiting (one rank, members arriving
    together) has no straggler.
    A per-run table rebuilt each time.
#}

with

members as (
    select
        run_id,
        iteration,
        rank,
        ranks_matched,
        is_last,
        wait_ns,
        wait_caused_ns
    from {{ ref('int_collective_members_aligned') }}
),

compute as (
    select
        run_id,
        rank,
        iteration,
        cast(sum(busy_ns) as bigint) as compute_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where kind = 'compute'
    group by 1, 2, 3
),

cpu_compute as (
    select
        run_id,
        rank,
        iteration,
        cast(sum(busy_ns) as bigint) as compute_ns
    from {{ ref('int_stage_work_merged') }}
    where timing_source = 'cpu'
    group by 1, 2, 3
),

ranks as (
    select
        run_id,
        rank,
        pp_stage,
        host_name
    from {{ ref('int_ranks_placed') }}
),

per_rank as (
    select
        run_id,
        iteration,
        rank,
        cast(count(*) as bigint) as collective_count,
        cast(sum(wait_caused_ns) as bigint) as wait_caused_ns,
        cast(sum(
            case when is_last and ranks_matched > 1 and wait_caused_ns > 0 then 1 else 0 end
        ) as bigint) as times_last,
        cast(sum(wait_ns) as bigint) as wait_ns
    from members
    group by 1, 2, 3
),

with_compute as (
    select
        per_rank.*,
        ranks.pp_stage,
        ranks.host_name,
        coalesce(compute.compute_ns, cpu_compute.compute_ns) as compute_ns,
        median(coalesce(compute.compute_ns, cpu_compute.compute_ns)) over (
            partition by per_rank.run_id, per_rank.iteration, ranks.pp_stage
        ) as stage_median_compute_ns
    from per_rank
    left join ranks
        on
            per_rank.run_id = ranks.run_id
            and per_rank.rank = ranks.rank
    left join compute
        on
            per_rank.run_id = compute.run_id
            and per_rank.rank = compute.rank
            and per_rank.iteration is not distinct from compute.iteration
    left join cpu_compute
        on
            per_rank.run_id = cpu_compute.run_id
            and per_rank.rank = cpu_compute.rank
            and per_rank.iteration is not distinct from cpu_compute.iteration
),

final as (
    select
        run_id,
        iteration,
        rank,
        pp_stage,
        host_name,
        collective_count,
        wait_caused_ns,
        times_last,
        wait_ns,
        compute_ns,
        cast(round(stage_median_compute_ns) as bigint) as stage_median_compute_ns,
        case
            when stage_median_compute_ns > 0 then compute_ns / stage_median_compute_ns
        end as compute_vs_stage_median,
        case
            when wait_caused_ns > 0
                then cast(row_number() over (
                    partition by run_id, iteration, wait_caused_ns > 0
                    order by wait_caused_ns desc, times_last desc, rank asc
                ) as bigint)
        end as straggler_rank
    from with_compute
)

select * from final
