{#
    One row per GPU kernel, copy or fill (trace_id, slice_id) with its
    training phase and microbatch.

    A kernel takes the phase of the Megatron step frames around its CPU
    launch: frames on the launch's own thread whose time holds the launch,
    plus the time windows of backward steps on any thread of the trace
    (autograd runs backward on its own thread, outside the schedule's
    backward_step frame). Among them the lowest seed priority wins
    (recompute > pp_p2p > dp_sync > optimizer > forward > backward), so no
    kernel is counted in two phases; none means `other`. The microbatch is
    that of the outermost forward/backward step found the same way.
    comm_group_kind (communication kernels only): the `process_group_kinds`
    seed on the kernel's `Process Group Description`, else the
    comm_group_kind of the winning step pattern (seed megatron_step_patterns).
#}

with

kernels as (
    select
        trace_id,
        slice_id,
        kind,
        process_group_desc,
        launch_track_id,
        launch_ts_ns
    from {{ ref('int_kernels_launched') }}
),

group_patterns as (
    select
        pattern_id,
        priority,
        group_kind,
        pattern
    from {{ ref('process_group_kinds') }}
),

group_descs as (
    select distinct process_group_desc
    from kernels
    where kind = 'communication' and process_group_desc is not null
),

group_desc_kinds as (
    select
        process_group_desc,
        group_kind
    from (
        select
            group_descs.process_group_desc,
            group_patterns.group_kind,
            row_number() over (
                partition by group_descs.process_group_desc
                order by group_patterns.priority, group_patterns.pattern_id
            ) as match_rank
        from group_descs
        inner join group_patterns
            on {{ regex_matches('group_descs.process_group_desc', 'group_patterns.pattern') }}
    ) as ranked
    where match_rank = 1
),

step_frames as (
    select
        trace_id,
        track_id,
        phase,
        pattern_id,
        is_outermost,
        microbatch,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
),

patterns as (
    select
        pattern_id,
        priority,
        comm_group_kind
    from {{ ref('megatron_step_patterns') }}
),

launched as (
    select *
    from kernels
    where launch_ts_ns is not null
),

same_thread_frames as (
    select
        launched.trace_id,
        launched.slice_id,
        step_frames.phase,
        step_frames.pattern_id,
        step_frames.microbatch
    from launched
    inner join step_frames
        on
            launched.trace_id = step_frames.trace_id
            and launched.launch_track_id = step_frames.track_id
            and launched.launch_ts_ns >= step_frames.ts_ns
            and launched.launch_ts_ns < step_frames.end_ns
),

backward_windows as (
    select
        launched.trace_id,
        launched.slice_id,
        step_frames.phase,
        step_frames.pattern_id,
        step_frames.microbatch
    from launched
    inner join step_frames
        on
            launched.trace_id = step_frames.trace_id
            and launched.launch_track_id <> step_frames.track_id
            and launched.launch_ts_ns >= step_frames.ts_ns
            and launched.launch_ts_ns < step_frames.end_ns
    where step_frames.phase = 'backward' and step_frames.is_outermost
),

candidates as (
    select * from same_thread_frames
    union all
    select * from backward_windows
),

ranked as (
    select
        candidates.trace_id,
        candidates.slice_id,
        candidates.phase,
        patterns.comm_group_kind as phase_group_kind,
        row_number() over (
            partition by candidates.trace_id, candidates.slice_id
            order by patterns.priority, candidates.pattern_id
        ) as phase_rank
    from candidates
    inner join patterns
        on candidates.pattern_id = patterns.pattern_id
),

phases as (
    select
        trace_id,
        slice_id,
        phase,
        phase_group_kind
    from ranked
    where phase_rank = 1
),

microbatches as (
    select
        trace_id,
        slice_id,
        max(microbatch) as microbatch
    from candidates
    where microbatch is not null
    group by 1, 2
),

phased as (
    select
        kernels.trace_id,
        kernels.slice_id,
        kernels.kind,
        kernels.process_group_desc,
        coalesce(phases.phase, 'other') as phase,
        phases.phase_group_kind,
        microbatches.microbatch
    from kernels
    left join phases
        on
            kernels.trace_id = phases.trace_id
            and kernels.slice_id = phases.slice_id
    left join microbatches
        on
            kernels.trace_id = microbatches.trace_id
            and kernels.slice_id = microbatches.slice_id
),

final as (
    select
        phased.trace_id,
        phased.slice_id,
        phased.phase,
        phased.microbatch,
        case
            when phased.kind = 'communication'
                then coalesce(group_desc_kinds.group_kind, phased.phase_group_kind)
        end as comm_group_kind,
        case
            when phased.kind = 'communication' and group_desc_kinds.group_kind is not null
                then 'process_group_desc'
            when phased.kind = 'communication' and phased.phase_group_kind is not null
                then 'phase'
        end as comm_group_source
    from phased
    left join group_desc_kinds
        on phased.process_group_desc = group_desc_kinds.process_group_desc
)

select * from final
