{#
    One row per run x rank with timings: the rank's mean compute,
    exposed communication (GPU) or communication frames (CPU) per
    iteration of the run's timing scope (fct_step_breakdown), the medians
    over the run's ranks and over its pipeline stage, and its slowness.

    Peer rule (one place): a rank's peers are the ranks of its pipeline
    stage (same layers, same work), or every rank of the run when its stage
    is unknown or it is alone in its stage. peer_group says which;
    slowness = compute_ns / peer_median_compute_ns (1.5 = 50 % slower than
    its peers), NULL when the peers' median is not positive. Why not the
    absolute maximum: the first and last stages do more work by design; a
    straggler is a rank slower than the ranks doing the same work.
    *_vs_median: the rank's value over the median over all ranks, NULL
    when either is zero or unknown.
    A per-run table rebuilt each time.
#}

with

per_rank as (
    select
        run_id,
        rank,
        max(timing_source) as timing_source,
        count(*) as rank_iterations,
        avg(step_ns) as mean_step_ns,
        avg(compute_ns) as compute_ns,
        avg(exposed_communication_ns) as exposed_communication_ns,
        sum(exposed_communication_ns) / nullif(sum(span_ns), 0)
            as exposed_communication_share,
        avg(comm_frames_ns) as comm_frames_ns,
        sum(comm_frames_ns) / nullif(sum(span_ns), 0) as comm_frames_share
    from {{ ref('fct_step_breakdown') }}
    group by 1, 2
),

ranks as (
    select
        run_id,
        rank,
        pp_stage,
        tp_rank,
        cp_rank,
        dp_rank
    from {{ ref('dim_ranks') }}
),

placed as (
    select
        per_rank.*,
        ranks.pp_stage,
        ranks.tp_rank,
        ranks.cp_rank,
        ranks.dp_rank
    from per_rank
    left join ranks
        on
            per_rank.run_id = ranks.run_id
            and per_rank.rank = ranks.rank
),

medians as (
    select
        *,
        median(compute_ns) over (partition by run_id) as median_compute_ns,
        median(compute_ns) over (partition by run_id, pp_stage) as stage_compute_median,
        count(*) over (partition by run_id, pp_stage) as stage_rank_count,
        median(exposed_communication_ns) over (partition by run_id)
            as median_exposed_communication_ns,
        median(comm_frames_ns) over (partition by run_id) as median_comm_frames_ns
    from placed
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
        end as slowness,
        case
            when compute_ns > 0 and median_compute_ns > 0
                then compute_ns / median_compute_ns
        end as compute_vs_median,
        exposed_communication_ns,
        exposed_communication_share,
        median_exposed_communication_ns,
        case
            when exposed_communication_ns > 0 and median_exposed_communication_ns > 0
                then exposed_communication_ns / median_exposed_communication_ns
        end as exposed_communication_vs_median,
        comm_frames_ns,
        comm_frames_share,
        median_comm_frames_ns,
        case
            when comm_frames_ns > 0 and median_comm_frames_ns > 0
                then comm_frames_ns / median_comm_frames_ns
        end as comm_frames_vs_median
    from peers
)

select * from final
