{#
    One row per run x pp group x iteration x stage x schedule part
    (warmup, steady, cooldown): where a stage's pipeline bubble lies in the
    schedule and what the stage was doing instead of its own work.

    The window, the stage's work and bubble = window - busy are those of
    int_pipeline_stages_windowed, what fct_pipeline_bubbles shows (the
    parts of a stage add up to its bubble_ns). Kernels with their kind,
    phase and group kind come from int_kernels_placed (fct_kernels' rows).
    fct_pipeline_bubble_parts shows these rows.
    Schedule parts of a stage: warmup from the group window's start to
    the start of the stage's first backward work, cooldown from the end of
    its last forward work (or the warm-up's end, if later) to the window's
    end, steady in between.
    The bubble is split by what ran on the stage's GPU during it, first
    match wins: p2p_wait (a pipeline send/recv kernel: phase pp_p2p or
    group kind pp), dp_wait (a data-parallel collective: phase dp_sync or
    group kind dp, dp_cp, edp; e.g. the gradient all-reduce waiting for a
    slow replica), collective_wait (any other communication kernel:
    tensor, context, expert parallel), other_kernel (compute or memory work
    outside forward/backward/recompute, e.g. optimizer kernels), idle
    (nothing ran). A stage timed from CPU step frames (no kernels) has
    p2p_wait from pp_p2p frames and dp_wait from dp_sync frames.
    One sweep per stage and iteration over the start and end of every
    kernel (or frame) and the part boundaries: no pairwise interval joins.
#}

{#- The lanes of the sweep, whose open counts are packed into one number. -#}
{%- set lanes = ['work', 'p2p', 'dp', 'collective', 'other_kernel'] %}

with

stages as (
    select
        run_id,
        pp_group_index,
        iteration,
        pp_stage,
        rank,
        timing_source,
        group_start_ns,
        group_end_ns,
        group_span_ns,
        {# One integer per stage and timing source: the sweep below sorts and
           groups its ~2 points per interval by this key instead of four
           columns, two of them strings (1.3-1.6 s -> 0.9-1.0 s over 1.0 M
           kernels). Deterministic, so every reference numbers alike. #}
        dense_rank() over (order by run_id, rank, iteration, timing_source) as stage_key
    from {{ ref('int_pipeline_stages_windowed') }}
),

kernels as (
    select
        run_id,
        rank,
        iteration,
        phase,
        kind,
        comm_group_kind,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_placed') }}
    where iteration is not null
),

step_frames as (
    select
        run_id,
        rank,
        iteration,
        phase,
        is_outermost,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where iteration is not null
),

{# Every interval of a stage, with its lane (work first, idle last). #}
gpu_intervals as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.iteration,
        'gpu' as timing_source,
        kernels.phase,
        case
            when
                kernels.kind <> 'communication'
                and kernels.phase in ('forward', 'backward', 'recompute')
                then 'work'
            when kernels.kind <> 'communication' then 'other_kernel'
            when kernels.phase = 'pp_p2p' or kernels.comm_group_kind = 'pp' then 'p2p'
            when
                kernels.phase = 'dp_sync' or kernels.comm_group_kind in ('dp', 'dp_cp', 'edp')
                then 'dp'
            else 'collective'
        end as lane,
        kernels.ts_ns,
        kernels.end_ns
    from kernels
),

cpu_intervals as (
    select
        run_id,
        rank,
        iteration,
        'cpu' as timing_source,
        phase,
        case
            when phase in ('forward', 'backward') and is_outermost then 'work'
            when phase = 'pp_p2p' then 'p2p'
            when phase = 'dp_sync' then 'dp'
        end as lane,
        ts_ns,
        end_ns
    from step_frames
    where
        (phase in ('forward', 'backward') and is_outermost)
        or phase in ('pp_p2p', 'dp_sync')
),

timed as (
    select * from gpu_intervals
    union all
    select * from cpu_intervals
),

intervals as (
    select
        stages.stage_key,
        stages.run_id,
        stages.rank,
        stages.iteration,
        stages.timing_source,
        timed.phase,
        timed.lane,
        timed.ts_ns,
        timed.end_ns
    from stages
    inner join timed
        on
            stages.run_id = timed.run_id
            and stages.rank = timed.rank
            and stages.iteration = timed.iteration
            and stages.timing_source = timed.timing_source
),

bounds as (
    select
        stages.stage_key,
        stages.run_id,
        stages.rank,
        stages.iteration,
        stages.timing_source,
        stages.group_start_ns,
        stages.group_end_ns,
        greatest(
            stages.group_start_ns,
            least(
                stages.group_end_ns,
                coalesce(
                    min(
                        case
                            when intervals.lane = 'work' and intervals.phase = 'backward'
                                then intervals.ts_ns
                        end
                    ),
                    stages.group_start_ns
                )
            )
        ) as warmup_end_ns,
        coalesce(
            max(
                case
                    when intervals.lane = 'work' and intervals.phase = 'forward'
                        then intervals.end_ns
                end
            ),
            stages.group_end_ns
        ) as last_forward_end_ns
    from stages
    left join intervals
        on
            stages.run_id = intervals.run_id
            and stages.rank = intervals.rank
            and stages.iteration = intervals.iteration
            and stages.timing_source = intervals.timing_source
    group by 1, 2, 3, 4, 5, 6, 7
),

parts as (
    select
        stage_key,
        run_id,
        rank,
        iteration,
        timing_source,
        group_start_ns,
        group_end_ns,
        warmup_end_ns,
        least(
            group_end_ns, greatest(warmup_end_ns, last_forward_end_ns)
        ) as cooldown_start_ns
    from bounds
),

{# Deltas of every lane at each point in time: +1 at an interval's start,
   -1 at its end; the four part boundaries add points with no delta. #}
edges as (
    select 1 as sign
    union all
    select -1 as sign
),

boundary_numbers as (
    select 1 as boundary
    union all
    select 2 as boundary
    union all
    select 3 as boundary
    union all
    select 4 as boundary
),

points as (
    select
        intervals.stage_key,
        {# An end before its start (a clock glitch) would make a count
           negative, which packed counts cannot hold: it ends at its start. #}
        case
            when edges.sign = 1 then intervals.ts_ns
            else greatest(intervals.ts_ns, intervals.end_ns)
        end as at_ns,
        {{ packed_count_delta('intervals.lane', lanes, 'edges.sign') }} as lane_delta
    from intervals
    cross join edges
    union all
    select
        parts.stage_key,
        case boundary_numbers.boundary
            when 1 then parts.group_start_ns
            when 2 then parts.warmup_end_ns
            when 3 then parts.cooldown_start_ns
            else parts.group_end_ns
        end as at_ns,
        0 as lane_delta
    from parts
    cross join boundary_numbers
),

point_deltas as (
    select
        stage_key,
        at_ns,
        sum(lane_delta) as lane_delta
    from points
    group by 1, 2
),

segments as (
    select
        stage_key,
        at_ns,
        lead(at_ns) over sweep as next_at_ns,
        sum(lane_delta) over sweep as open_lanes
    from point_deltas
    {# One window for the lead and the running sum (one sort): at_ns is
       unique within a partition after point_deltas, so the default frame
       (range up to the current row) is the running sum up to this point.
       The five lanes' open counts are packed into that one sum
       (macros/packed_counts.sql). #}
    window
        sweep as (partition by stage_key order by at_ns)
),

classified as (
    select
        parts.run_id,
        parts.rank,
        parts.iteration,
        parts.timing_source,
        case
            when segments.at_ns < parts.warmup_end_ns then 'warmup'
            when segments.at_ns >= parts.cooldown_start_ns then 'cooldown'
            else 'steady'
        end as schedule_part,
        case
            when {{ packed_count('segments.open_lanes', lanes, 'work') }} > 0 then 'busy'
            when {{ packed_count('segments.open_lanes', lanes, 'p2p') }} > 0 then 'p2p_wait'
            when {{ packed_count('segments.open_lanes', lanes, 'dp') }} > 0 then 'dp_wait'
            when {{ packed_count('segments.open_lanes', lanes, 'collective') }} > 0
                then 'collective_wait'
            when {{ packed_count('segments.open_lanes', lanes, 'other_kernel') }} > 0
                then 'other_kernel'
            else 'idle'
        end as state,
        segments.next_at_ns - segments.at_ns as length_ns
    from segments
    inner join parts
        on segments.stage_key = parts.stage_key
    where
        segments.next_at_ns is not null
        and segments.at_ns >= parts.group_start_ns
        and segments.next_at_ns <= parts.group_end_ns
),

part_totals as (
    select
        run_id,
        rank,
        iteration,
        timing_source,
        schedule_part,
        cast(sum(case when state = 'busy' then length_ns else 0 end) as bigint) as busy_ns,
        cast(sum(case when state = 'p2p_wait' then length_ns else 0 end) as bigint) as p2p_wait_ns,
        cast(sum(case when state = 'dp_wait' then length_ns else 0 end) as bigint) as dp_wait_ns,
        cast(sum(case when state = 'collective_wait' then length_ns else 0 end) as bigint)
            as collective_wait_ns,
        cast(sum(case when state = 'other_kernel' then length_ns else 0 end) as bigint)
            as other_kernel_ns,
        cast(sum(case when state = 'idle' then length_ns else 0 end) as bigint) as idle_ns
    from classified
    group by 1, 2, 3, 4, 5
),

schedule_parts as (
    select
        'warmup' as schedule_part,
        1 as part_order
    union all
    select
        'steady' as schedule_part,
        2 as part_order
    union all
    select
        'cooldown' as schedule_part,
        3 as part_order
),

with_parts as (
    select
        stages.run_id,
        stages.pp_group_index,
        stages.iteration,
        stages.pp_stage,
        stages.rank,
        stages.timing_source,
        schedule_parts.schedule_part,
        schedule_parts.part_order,
        case schedule_parts.schedule_part
            when 'warmup' then parts.group_start_ns
            when 'steady' then parts.warmup_end_ns
            else parts.cooldown_start_ns
        end as part_start_ns,
        case schedule_parts.schedule_part
            when 'warmup' then parts.warmup_end_ns
            when 'steady' then parts.cooldown_start_ns
            else parts.group_end_ns
        end as part_end_ns,
        stages.group_span_ns,
        coalesce(part_totals.busy_ns, 0) as busy_ns,
        coalesce(part_totals.p2p_wait_ns, 0)
        + coalesce(part_totals.dp_wait_ns, 0)
        + coalesce(part_totals.collective_wait_ns, 0)
        + coalesce(part_totals.other_kernel_ns, 0)
        + coalesce(part_totals.idle_ns, 0) as bubble_ns,
        coalesce(part_totals.p2p_wait_ns, 0) as p2p_wait_ns,
        coalesce(part_totals.dp_wait_ns, 0) as dp_wait_ns,
        coalesce(part_totals.collective_wait_ns, 0) as collective_wait_ns,
        coalesce(part_totals.other_kernel_ns, 0) as other_kernel_ns,
        coalesce(part_totals.idle_ns, 0) as idle_ns
    from stages
    inner join parts
        on
            stages.run_id = parts.run_id
            and stages.rank = parts.rank
            and stages.iteration = parts.iteration
            and stages.timing_source = parts.timing_source
    cross join schedule_parts
    left join part_totals
        on
            stages.run_id = part_totals.run_id
            and stages.rank = part_totals.rank
            and stages.iteration = part_totals.iteration
            and stages.timing_source = part_totals.timing_source
            and schedule_parts.schedule_part = part_totals.schedule_part
),

final as (
    select
        *,
        case
            when group_span_ns > 0 then cast(bubble_ns as double) / group_span_ns
        end as bubble_ratio
    from with_parts
)

select * from final
