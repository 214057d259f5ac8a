{#
    One row per run x rank with a step: the rank's mean step and compute
    per iteration, its step's parts as shares (ratios of sums, macro
    share_of_sums, over the rank's rows of fct_rank_iterations), and its
    compute against its peers.

    compute_ns: the mean per iteration of the time the rank computed in its
    step (step_compute_ns + step_overlap_ns: GPU compute kernels, or
    forward/backward/recompute frames on CPU-timed runs).
    Peer rule (one place): a rank's peers are the ranks of its pipeline
    stage (same layers, same work), or every rank of the run when its stage
    is unknown or it is alone in its stage. peer_group says which;
    compute_vs_peers = compute_ns / peer_median_compute_ns (1.5 = 50 %
    more compute than its peers), NULL when the peers' median is not
    positive. This is not the straggler (fct_stragglers: the rank whose
    late arrivals cost the others the most waiting): a rank computing more
    than its peers is a candidate cause, the straggler is the measured one.
    *_vs_median: the rank's value over the median over all ranks, NULL
    when either is zero or unknown.
    A per-run table rebuilt each time.
#}

with

rank_iterations as (
    select
        run_id,
        rank,
        timing_source,
        pp_stage,
        tp_rank,
        cp_rank,
        dp_rank,
        step_ns,
        step_compute_ns + step_overlap_ns as step_computing_ns,
        step_compute_ns,
        step_overlap_ns,
        step_exposed_communication_ns,
        step_exposed_memory_ns,
        step_optimizer_ns,
        step_idle_ns
    from {{ ref('fct_rank_iterations') }}
    where step_ns is not null
),

per_rank as (
    select
        run_id,
        rank,
        max(timing_source) as timing_source,
        max(pp_stage) as pp_stage,
        max(tp_rank) as tp_rank,
        max(cp_rank) as cp_rank,
        max(dp_rank) as dp_rank,
        count(*) as rank_iterations,
        avg(step_ns) as mean_step_ns,
        avg(step_computing_ns) as compute_ns,
        avg(step_exposed_communication_ns) as exposed_communication_ns,
        {{ step_part_shares() }}
    from rank_iterations
    group by 1, 2
),

medians as (
    select
        *,
        median(compute_ns) over (partition by run_id) as median_compute_ns,
        median(compute_ns) over (partition by run_id, pp_stage) as stage_compute_median,
        count(*) over (partition by run_id, pp_stage) as stage_rank_count,
        median(exposed_communication_ns) over (partition by run_id)
            as median_exposed_communication_ns
    from per_rank
),

peers as (
    select
        *,
        case when pp_stage is not null then stage_rank_count end as stage_ranks,
        case when pp_stage is not null then stage_compute_median end
            as stage_median_compute_ns,
        case
            when pp_stage is not null and stage_rank_count > 1 then 'pp_stage' else 'run'
        end as peer_group,
        case
            when pp_stage is not null and stage_rank_count > 1 then stage_compute_median
            else median_compute_ns
        end as peer_median_compute_ns
    from medians
),

final as (
    select
        run_id,
        rank,
        timing_source,
        pp_stage,
        tp_rank,
        cp_rank,
        dp_rank,
        rank_iterations,
        mean_step_ns,
        compute_ns,
        median_compute_ns,
        stage_ranks,
        stage_median_compute_ns,
        peer_group,
        peer_median_compute_ns,
        case
            when peer_median_compute_ns > 0
                then coalesce(compute_ns, 0) / peer_median_compute_ns
        end as compute_vs_peers,
        case
            when compute_ns > 0 and median_compute_ns > 0
                then compute_ns / median_compute_ns
        end as compute_vs_median,
        exposed_communication_ns,
        median_exposed_communication_ns,
        case
            when exposed_communication_ns > 0 and median_exposed_communication_ns > 0
                then exposed_communication_ns / median_exposed_communication_ns
        end as exposed_communication_vs_median,
        compute_share,
        overlap_share,
        exposed_communication_share,
        exposed_memory_share,
        optimizer_share,
        idle_share
    from peers
)

select * from final
