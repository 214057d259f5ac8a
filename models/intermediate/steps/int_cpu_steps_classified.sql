{#
    One row per CPU frame (trace_id, slice_id) that is a Megatron step
    (seed `megatron_step_patterns`), with its phase, iteration and, for the
    outermost forward/backward steps, the microbatch index.

    Frames are with_stack names `path/file.py(N): func`, split once in
    int_slices_contextualized; patterns match the function part (and
    `file_pattern`, when set, the path part), never the whole name. The
    lowest `priority` wins (macro first_match). A recompute frame inside a
    forward step is no step: Megatron's CheckpointFunction.forward runs the
    same custom_forward (no_grad) that its backward re-runs. A frame nested in an earlier
    frame of the same phase on the same track (Megatron's schedule
    forward_step calling pretrain_gpt's forward_step) is not outermost.
    Microbatch = 0-based order by start of the outermost forward (backward)
    steps of the trace and iteration. tid and thread_name: the frame's
    thread (the trace's own `threads`, read here per trace so that the
    mart fct_cpu_steps is a view that reads no lake file).
    Per trace (materialized per_trace): keyed by trace_id.
#}

{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

frames as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        frame_file as file_path,
        frame_function as function_name,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_slices_contextualized') }}
    where
        frame_kind = 'python'
        and {{ new_traces }}
),

threads as (
    select * from {{ trace_threads(pending) }} as scanned  -- noqa: AM04
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

frame_names as (
    select distinct
        file_path,
        function_name
    from frames
),

name_candidates as (
    select
        frame_names.file_path,
        frame_names.function_name,
        patterns.phase,
        patterns.pattern_id,
        patterns.priority
    from frame_names
    inner join patterns
        on
            {{ regex_matches('frame_names.function_name', 'patterns.pattern') }}
            and (
                patterns.file_pattern is null
                or {{ regex_matches('frame_names.file_path', 'patterns.file_pattern') }}
            )
),

name_matches as (
    {{ first_match('name_candidates', ['file_path', 'function_name'], ['priority', 'pattern_id']) }}
),

step_frames as (
    select
        frames.*,
        name_matches.phase,
        name_matches.pattern_id
    from frames
    inner join name_matches
        on
            frames.file_path = name_matches.file_path
            and frames.function_name = name_matches.function_name
),

-- Megatron's CheckpointFunction.forward runs the same custom_forward that its
-- backward re-runs (under no_grad, inside the schedule's forward_step): a
-- recompute frame inside a forward step is the forward's own pass, no step.
forward_windows as (
    select
        trace_id,
        ts_ns,
        end_ns
    from step_frames
    where phase = 'forward'
),

first_passes as (
    select distinct
        step_frames.trace_id,
        step_frames.slice_id
    from step_frames
    inner join forward_windows
        on
            step_frames.trace_id = forward_windows.trace_id
            and step_frames.ts_ns >= forward_windows.ts_ns
            and step_frames.ts_ns < forward_windows.end_ns
    where step_frames.phase = 'recompute'
),

kept_frames as (
    select step_frames.*
    from step_frames
    left join first_passes
        on
            step_frames.trace_id = first_passes.trace_id
            and step_frames.slice_id = first_passes.slice_id
    where first_passes.slice_id is null
),

with_previous_end as (
    select
        *,
        max(end_ns) over (
            partition by trace_id, track_id, phase
            order by ts_ns asc, end_ns desc
            rows between unbounded preceding and 1 preceding
        ) as previous_end_ns
    from kept_frames
),

outermost as (
    select
        *,
        (previous_end_ns is null or ts_ns >= previous_end_ns) as is_outermost
    from with_previous_end
),

final as (
    select
        outermost.run_id,
        outermost.rank,
        outermost.trace_id,
        outermost.slice_id,
        outermost.track_id,
        threads.tid,
        threads.thread_name,
        outermost.file_path,
        outermost.function_name,
        outermost.phase,
        outermost.pattern_id,
        outermost.iteration,
        outermost.is_outermost,
        case
            when outermost.is_outermost and outermost.phase in ('forward', 'backward')
                then row_number() over (
                    partition by
                        outermost.trace_id,
                        outermost.iteration,
                        outermost.phase,
                        outermost.is_outermost
                    order by outermost.ts_ns
                ) - 1
        end as microbatch,
        outermost.ts_ns,
        outermost.end_ns
    from outermost
    left join threads
        on
            outermost.trace_id = threads.trace_id
            and outermost.track_id = threads.track_id
)

select * from final
