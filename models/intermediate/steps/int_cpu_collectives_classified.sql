{#
    One row per CPU-side collective event on a thread that runs Python
    (trace_id, slice_id), with the parallel-group kind of its call site.

    Without GPU kernels (gloo, CPU captures) a collective shows as a
    `c10d::*` cpu_op on the calling thread (event_type `call`) and, for
    send/recv, a `gloo:send`/`gloo:recv` annotation on the same thread that
    lasts until the wait returns and so outlives the frame that started it
    (event_type `wait`). Neither carries process-group args, so the group
    comes from the call stack: the frames on the same thread whose time
    holds the event's start; of those matching the seed
    `collective_group_patterns` (function part of `path(N): func`, and
    file_pattern on the path) the innermost wins, then the lowest priority.
    gloo:* annotations on gloo's worker threads (no Python frames) repeat
    the calls and are left out. A rule may name another group for traces
    that run megatron-core's DistributedOptimizer (a frame whose file
    matches var distributed_optimizer_file_pattern): the grad-norm
    all-reduce then spans the optimizer instance, not the model-parallel
    group (DistributedOptimizer.get_grad_stats_parallel_group).
    Iteration from int_slices_contextualized (the ProfilerStep holding the
    start, else the trace's iteration).
    Per trace (materialized per_trace): keyed by trace_id.
#}

{%- set distributed_optimizer_file = var(
    'distributed_optimizer_file_pattern', 'distrib_optimizer\\.py$'
) %}

{#- int_slices_contextualized is read twice, each read with its own filter,
    rather than through one import CTE that the others share: DuckDB
    materializes a CTE read more than once, and that one held 2 M CPU slices
    (12 columns, strings among them) to keep 172 k collectives and the
    Python frames on their threads: a third of this model's 5.6 s at 256
    ranks x 2 (benchmarks/README.md, "The build without the what-if
    models"). Each read here is a filtered column scan. -#}

with

collective_slices as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        iteration,
        name,
        ts_ns,
        end_ns
    from {{ ref('int_slices_contextualized') }}
    where
        not is_gpu
        and (name like 'c10d::%' or name like 'gloo:%')
        and {{ trace_filter(traces_pending()) }}
),

python_slices as (
    select
        trace_id,
        slice_id,
        track_id,
        ts_ns,
        end_ns,
        frame_file,
        frame_function
    from {{ ref('int_slices_contextualized') }}
    where
        not is_gpu
        and frame_kind = 'python'
        and {{ trace_filter(traces_pending()) }}
),

patterns as (
    select
        pattern_id,
        priority,
        kind,
        group_kind,
        distributed_optimizer_kind,
        distributed_optimizer_group_kind,
        pattern,
        file_pattern
    from {{ ref('collective_group_patterns') }}
),

collective_tracks as (
    select distinct
        trace_id,
        track_id
    from collective_slices
),

{# Python frames, only on threads that issue collectives. #}
frames as (
    select
        python_slices.trace_id,
        python_slices.slice_id,
        python_slices.track_id,
        python_slices.ts_ns,
        python_slices.end_ns,
        python_slices.frame_file as file_path,
        python_slices.frame_function as function_name
    from python_slices
    inner join collective_tracks
        on
            python_slices.trace_id = collective_tracks.trace_id
            and python_slices.track_id = collective_tracks.track_id
),

{# The distinct call sites of each thread: what the per-trace and per-thread
   questions below need of the frames, a few hundred rows per thread
   instead of every frame. #}
frame_sites as (
    select distinct
        trace_id,
        track_id,
        file_path,
        function_name
    from frames
),

distributed_optimizer_traces as (
    select distinct trace_id
    from frame_sites
    where {{ regex_matches('file_path', "'" ~ distributed_optimizer_file ~ "'") }}
),

python_tracks as (
    select distinct
        trace_id,
        track_id
    from frame_sites
),

events as (
    select
        collective_slices.*,
        case when collective_slices.name like 'c10d::%' then 'call' else 'wait' end as event_type
    from collective_slices
    inner join python_tracks
        on
            collective_slices.trace_id = python_tracks.trace_id
            and collective_slices.track_id = python_tracks.track_id
),

frame_names as (
    select distinct
        file_path,
        function_name
    from frame_sites
),

name_matches as (
    select
        frame_names.file_path,
        frame_names.function_name,
        patterns.pattern_id,
        patterns.priority,
        patterns.kind,
        patterns.group_kind,
        patterns.distributed_optimizer_kind,
        patterns.distributed_optimizer_group_kind
    from frame_names
    inner join patterns
        on
            {{ regex_matches('frame_names.function_name', 'patterns.pattern') }}
            and (
                patterns.file_pattern is null
                or {{ regex_matches('frame_names.file_path', 'patterns.file_pattern') }}
            )
),

call_site_frames as (
    select
        frames.trace_id,
        frames.track_id,
        frames.file_path,
        frames.function_name,
        frames.ts_ns,
        frames.end_ns,
        name_matches.pattern_id,
        name_matches.priority,
        name_matches.kind,
        name_matches.group_kind,
        name_matches.distributed_optimizer_kind,
        name_matches.distributed_optimizer_group_kind
    from frames
    inner join name_matches
        on
            frames.file_path = name_matches.file_path
            and frames.function_name = name_matches.function_name
),

{# The innermost seed frame holding the event's start, then the lowest priority. #}
call_site_candidates as (
    select
        events.trace_id,
        events.slice_id,
        call_site_frames.file_path,
        call_site_frames.function_name,
        call_site_frames.ts_ns as call_site_ts_ns,
        call_site_frames.end_ns as call_site_end_ns,
        call_site_frames.pattern_id,
        call_site_frames.priority,
        call_site_frames.kind,
        call_site_frames.group_kind,
        call_site_frames.distributed_optimizer_kind,
        call_site_frames.distributed_optimizer_group_kind
    from events
    inner join call_site_frames
        on
            events.trace_id = call_site_frames.trace_id
            and events.track_id = call_site_frames.track_id
            and events.ts_ns >= call_site_frames.ts_ns
            and events.ts_ns < call_site_frames.end_ns
),

call_sites as (
    {{ first_match(
        'call_site_candidates',
        ['trace_id', 'slice_id'],
        ['call_site_ts_ns desc', 'call_site_end_ns asc', 'priority asc', 'pattern_id asc'],
    ) }}
),

final as (
    select
        events.run_id,
        events.rank,
        events.trace_id,
        events.slice_id,
        events.track_id,
        events.iteration,
        events.name,
        regexp_replace(
            regexp_replace(events.name, '^(c10d::|gloo:)', ''), '_$', ''
        ) as collective,
        events.event_type,
        case
            when distributed_optimizer_traces.trace_id is not null
                then coalesce(call_sites.distributed_optimizer_kind, call_sites.kind)
            else call_sites.kind
        end as comm_group_kind,
        case
            when distributed_optimizer_traces.trace_id is not null
                then coalesce(call_sites.distributed_optimizer_group_kind, call_sites.group_kind)
            else call_sites.group_kind
        end as comm_process_group_kind,
        call_sites.pattern_id,
        call_sites.file_path as call_site_file,
        call_sites.function_name as call_site_function,
        coalesce(events.end_ns > call_sites.call_site_end_ns, false) as is_outliving_call_site,
        events.ts_ns,
        events.end_ns - events.ts_ns as dur_ns,
        events.end_ns
    from events
    left join call_sites
        on
            events.trace_id = call_sites.trace_id
            and events.slice_id = call_sites.slice_id
    left join distributed_optimizer_traces
        on events.trace_id = distributed_optimizer_traces.trace_id
)

select * from final
