{#
    One row per CPU frame (trace_id, slice_id) that is a Megatron step
    (seed `megatron_step_patterns`), with its phase, iteration and, for the
    outermost forward/backward steps, the microbatch index.

    Frames are with_stack names `path/file.py(N): func`; patterns match the
    function part (and `file_pattern`, when set, the path part), never the
    whole name. The lowest `priority` wins. A frame nested in an earlier
    frame of the same phase on the same track (Megatron's schedule
    forward_step calling pretrain_gpt's forward_step) is not outermost.
    Microbatch = 0-based order by start of the outermost forward (backward)
    steps of the trace and iteration.
    Incremental by trace (macros/incremental_traces.sql): every row depends
    on its own trace only (and the seed, in the code fingerprint), so a
    build computes the frames of new traces only and deletes those of
    unloaded ones.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete('trace') }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

slices as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        name,
        ts_ns,
        end_ns
    from {{ ref('stg_lake__slices') }}
    where
        name like '%): %'
        and {{ incremental_traces_where('trace') }}
),

patterns as (
    select
        pattern_id,
        priority,
        phase,
        pattern,
        file_pattern
    from {{ ref('megatron_step_patterns') }}
),

traces as (
    select
        trace_id,
        iteration,
        min_profiler_step
    from {{ ref('stg_lake__traces') }}
    where {{ incremental_traces_where('trace') }}
),

profiler_steps as (
    select
        trace_id,
        step_number,
        ts_ns,
        end_ns
    from {{ ref('int_profiler_steps') }}
    where {{ incremental_traces_where('trace') }}
),

frames as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        ts_ns,
        end_ns,
        substring(name, 1, strpos(name, '(') - 1) as file_path,
        substring(name, strpos(name, '): ') + 3) as function_name
    from slices
),

frame_names as (
    select distinct
        file_path,
        function_name
    from frames
),

name_matches as (
    select
        frame_names.file_path,
        frame_names.function_name,
        patterns.phase,
        patterns.pattern_id,
        row_number() over (
            partition by frame_names.file_path, frame_names.function_name
            order by patterns.priority, patterns.pattern_id
        ) as match_rank
    from frame_names
    inner join patterns
        on
            {{ regex_matches('frame_names.function_name', 'patterns.pattern') }}
            and (
                patterns.file_pattern is null
                or {{ regex_matches('frame_names.file_path', 'patterns.file_pattern') }}
            )
),

step_frames as (
    select
        frames.run_id,
        frames.rank,
        frames.trace_id,
        frames.slice_id,
        frames.track_id,
        frames.file_path,
        frames.function_name,
        name_matches.phase,
        name_matches.pattern_id,
        frames.ts_ns,
        frames.end_ns
    from frames
    inner join name_matches
        on
            frames.file_path = name_matches.file_path
            and frames.function_name = name_matches.function_name
    where name_matches.match_rank = 1
),

frame_steps as (
    select
        step_frames.trace_id,
        step_frames.slice_id,
        max(profiler_steps.step_number) as step_number
    from step_frames
    inner join profiler_steps
        on
            step_frames.trace_id = profiler_steps.trace_id
            and step_frames.ts_ns >= profiler_steps.ts_ns
            and step_frames.ts_ns < profiler_steps.end_ns
    group by 1, 2
),

with_iteration as (
    select
        step_frames.*,
        case
            when traces.min_profiler_step is null
                then coalesce(traces.iteration, {{ var('default_iteration') }})
            else frame_steps.step_number
        end as iteration,
        max(step_frames.end_ns) over (
            partition by step_frames.trace_id, step_frames.track_id, step_frames.phase
            order by step_frames.ts_ns asc, step_frames.end_ns desc
            rows between unbounded preceding and 1 preceding
        ) as previous_end_ns
    from step_frames
    left join frame_steps
        on
            step_frames.trace_id = frame_steps.trace_id
            and step_frames.slice_id = frame_steps.slice_id
    left join traces
        on step_frames.trace_id = traces.trace_id
),

outermost as (
    select
        *,
        (previous_end_ns is null or ts_ns >= previous_end_ns) as is_outermost
    from with_iteration
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        file_path,
        function_name,
        phase,
        pattern_id,
        iteration,
        is_outermost,
        case
            when is_outermost and phase in ('forward', 'backward')
                then row_number() over (
                    partition by
                        trace_id,
                        iteration,
                        phase,
                        is_outermost
                    order by ts_ns
                ) - 1
        end as microbatch,
        ts_ns,
        end_ns
    from outermost
)

select * from final
