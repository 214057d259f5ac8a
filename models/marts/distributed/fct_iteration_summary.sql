{#
    One row per run x iteration: the numbers a performance engineer reads
    first, and what `tracehouse compare` and the report's headline show.

    step_ns: the iteration's step time, the slowest rank's step
    (fct_rank_steps.step_ns: the GPU-projected step, or the CPU step on
    runs without kernels): a synchronous job waits for its slowest rank.
    mean_step_ns / min_step_ns over the ranks show the spread;
    slowest_rank is the rank with the longest step (lowest rank on ties).
    straggler_rank: the rank that holds the job back most by arrival
    order (fct_stragglers.straggler_rank = 1), with the waiting its late
    arrivals cost the others; NULL when no rank caused any waiting. A slow
    step is not always the straggler's:
    a victim waits inside its collectives.
    worst_skew_*: the collective of the iteration whose members started
    furthest apart (fct_collectives.start_skew_ns), its op, group and the
    rank that arrived last.
    exposed_communication_share: communication not hidden under compute
    over the ranks' steps (sum of fct_rank_iterations.exposed_communication_ns
    / sum of step_ns); on CPU-only runs, the pp_p2p and dp_sync step
    frames over the steps (fct_microbatch_phases, timing_source 'cpu').
    bubble_ratio: the mean over pipeline stages and groups of
    fct_pipeline_bubbles.bubble_ratio, beside the schedule's theory.
    A per-run table rebuilt each time (small: one row per iteration).
#}

with

steps as (
    select
        run_id,
        rank,
        iteration,
        step_ns,
        step_source,
        row_number() over (
            partition by run_id, iteration order by step_ns desc, rank asc
        ) as slowness_order
    from {{ ref('fct_rank_steps') }}
    where iteration is not null and step_ns is not null
),

step_totals as (
    select
        run_id,
        iteration,
        case
            when bool_or(step_source = 'gpu_kernels') then 'gpu' else 'cpu'
        end as timing_source,
        count(distinct rank) as ranks,
        max(step_ns) as step_ns,
        cast(avg(step_ns) as bigint) as mean_step_ns,
        min(step_ns) as min_step_ns,
        sum(step_ns) as rank_step_total_ns,
        max(case when slowness_order = 1 then rank end) as slowest_rank
    from steps
    group by 1, 2
),

gpu_exposed as (
    select
        run_id,
        iteration,
        sum(exposed_communication_ns) as exposed_communication_ns
    from {{ ref('fct_rank_iterations') }}
    where iteration is not null
    group by 1, 2
),

cpu_exposed as (
    select
        run_id,
        iteration,
        sum(busy_ns) as exposed_communication_ns
    from {{ ref('fct_microbatch_phases') }}
    where
        timing_source = 'cpu'
        and phase in ('pp_p2p', 'dp_sync')
        and iteration is not null
    group by 1, 2
),

stragglers as (
    select
        run_id,
        iteration,
        rank as straggler_rank,
        wait_caused_ns as straggler_wait_caused_ns,
        times_last as straggler_times_last
    from {{ ref('fct_stragglers') }}
    -- A rank that cost nobody any waiting (one member, or all arriving
    -- together) holds nothing back: no straggler then.
    where straggler_rank = 1 and wait_caused_ns > 0
),

skews as (
    select
        run_id,
        iteration,
        start_skew_ns as worst_skew_ns,
        op as worst_skew_op,
        process_group_key as worst_skew_process_group,
        last_rank as worst_skew_last_rank
    from (
        select
            run_id,
            iteration,
            start_skew_ns,
            op,
            process_group_key,
            last_rank,
            row_number() over (
                partition by run_id, iteration order by start_skew_ns desc, collective_id asc
            ) as skew_order
        from {{ ref('fct_collectives') }}
        where iteration is not null and start_skew_ns is not null
    ) as ordered
    where skew_order = 1
),

bubbles as (
    select
        run_id,
        iteration,
        {{ mean_in_value_order('bubble_ratio') }} as bubble_ratio,
        {{ mean_in_value_order('theoretical_bubble_ratio') }} as theoretical_bubble_ratio
    from {{ ref('fct_pipeline_bubbles') }}
    group by 1, 2
),

final as (
    select
        step_totals.run_id,
        step_totals.iteration,
        step_totals.timing_source,
        step_totals.ranks,
        step_totals.step_ns,
        step_totals.mean_step_ns,
        step_totals.min_step_ns,
        step_totals.slowest_rank,
        stragglers.straggler_rank,
        stragglers.straggler_wait_caused_ns,
        stragglers.straggler_times_last,
        skews.worst_skew_ns,
        skews.worst_skew_op,
        skews.worst_skew_process_group,
        skews.worst_skew_last_rank,
        case
            when step_totals.timing_source = 'gpu' then gpu_exposed.exposed_communication_ns
            else cpu_exposed.exposed_communication_ns
        end / nullif(step_totals.rank_step_total_ns, 0) as exposed_communication_share,
        bubbles.bubble_ratio,
        bubbles.theoretical_bubble_ratio
    from step_totals
    left join gpu_exposed
        on
            step_totals.run_id = gpu_exposed.run_id
            and step_totals.iteration = gpu_exposed.iteration
    left join cpu_exposed
        on
            step_totals.run_id = cpu_exposed.run_id
            and step_totals.iteration = cpu_exposed.iteration
    left join stragglers
        on
            step_totals.run_id = stragglers.run_id
            and step_totals.iteration = stragglers.iteration
    left join skews
        on
            step_totals.run_id = skews.run_id
            and step_totals.iteration = skews.iteration
    left join bubbles
        on
            step_totals.run_id = bubbles.run_id
            and step_totals.iteration = bubbles.iteration
)

select * from final
