{#
    One row per launched GPU kernel, copy or fill (trace_id, slice_id), that
    gets a training phase from its launch: the phase, the comm_group_kind of
    the winning Megatron step pattern and the microbatch with its step. A
    kernel without a row here (no launch, no frame and no torch signal
    around it) is `other` in int_kernels_classified, which joins this in.
    The rules: the Megatron step frames around its CPU launch
    (int_cpu_steps_classified): frames on the launch's own thread whose time
    holds the launch, plus the time windows of backward steps on any thread
    of the trace (autograd runs backward on its own thread, outside the
    schedule's backward_step frame). Among them the lowest seed priority
    wins (recompute > pp_p2p > dp_sync > optimizer > forward > backward), so
    no kernel is counted in two phases. The microbatch is that of the
    outermost forward/backward step found the same way (`step_slice_id`,
    the key of its vpp chunk in int_microbatch_steps_chunked).
    A plain PyTorch trace (no Megatron step frame at all: Megatron's keep
    priority, so a Megatron trace's phases are its frames' alone) takes the
    phase from torch's own signals, seed torch_phase_patterns (lowest
    priority wins): launched inside a range it names (torch.optim's
    `Optimizer.step#AdamW.step`, `Optimizer.zero_grad#...`), or in a range
    nested in one, optimizer; launched from the autograd engine's thread
    (int_backward_threads_found), backward. Forward is the rest of the step
    before its first backward launch (all of a step without one: inference):
    the loss is computed there, so it counts as forward; copies launched
    there (the batch's host-to-device copy) are data movement, `other`.
    Work after the first backward launch that no range names (`.item()`'s
    copy, a host-side metric, the LR scheduler) and work outside every step
    is `other` (no row here). These kernels have no microbatch (one per step).

    Why a model of its own, narrow, rather than CTEs of
    int_kernels_classified: in one query with the kernels, DuckDB's
    estimates of these matches (range joins, windows) ran 10x high, so it
    built the final join's hash table on the wide kernel rows (30 columns,
    a million rows at 256 ranks x 2 iterations) instead of on these six
    columns: 2.4 GiB, the peak of the whole build. Read from a table, the
    row count is exact and the join builds on this side (benchmarks/README.md,
    issue 30). Per trace (materialized per_trace): keyed by trace_id.
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The traces to compute, read once for every scan (macros/per_trace.sql). -#}
{%- set new_traces = trace_filter(traces_pending()) %}

with

step_frames as (
    select
        trace_id,
        slice_id as step_slice_id,
        track_id,
        phase,
        pattern_id,
        is_outermost,
        microbatch,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where {{ new_traces }}
),

{# The seed's rows in their order of precedence (priority, then pattern_id):
   the winning pattern of a kernel is then its candidates' least
   pattern_order, an aggregate, not a window over every candidate. #}
patterns as (
    select
        pattern_id,
        comm_group_kind,
        row_number() over (order by priority, pattern_id) as pattern_order
    from {{ ref('megatron_step_patterns') }}
),

{# The kernels with a CPU launch: only the columns the matches read. #}
launched as (
    select
        trace_id,
        slice_id,
        category,
        iteration,
        annotation_slice_id,
        launch_track_id,
        launch_ts_ns
    from {{ ref('int_slices_contextualized') }}
    where
        category in (
            {%- for category in var('kernel_categories') %}
                '{{ category }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
        and launch_ts_ns is not null
        and {{ new_traces }}
),

{# Two joins rather than one with `same track or outermost backward`: the
   first hashes on the thread, the second joins only the few outermost
   backward steps; an OR would compare every kernel with every step frame
   of its trace. #}
same_thread_frames as (
    select
        launched.trace_id,
        launched.slice_id,
        step_frames.phase,
        step_frames.pattern_id,
        step_frames.step_slice_id,
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
        step_frames.step_slice_id,
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
    select
        frames.*,
        patterns.pattern_order,
        patterns.comm_group_kind as phase_group_kind
    from (
        select * from same_thread_frames
        union all
        select * from backward_windows
    ) as frames
    inner join patterns
        on frames.pattern_id = patterns.pattern_id
),

{# The winning pattern's phase and group kind: both are the pattern's own
   (int_cpu_steps_classified takes a frame's phase from its pattern), so the
   least pattern_order decides them whichever candidate carries it. A
   GROUP BY rather than first_match's row_number: the window sorted all
   1.4 M candidates of a 256 x 2 build by their string key, ~0.7 of this
   model's ~5 CPU s (benchmarks/README.md, "The slices and kernels layers"). #}
phases as (
    select
        trace_id,
        slice_id,
        min_by(phase, pattern_order) as phase,
        min_by(phase_group_kind, pattern_order) as phase_group_kind
    from candidates
    group by 1, 2
),

{# The step that gives the kernel its microbatch: one of the winning phase first. #}
microbatch_candidates as (
    select
        candidates.trace_id,
        candidates.slice_id,
        candidates.step_slice_id,
        candidates.microbatch,
        case when candidates.phase = phases.phase then 0 else 1 end as phase_order
    from candidates
    inner join phases
        on
            candidates.trace_id = phases.trace_id
            and candidates.slice_id = phases.slice_id
    where candidates.microbatch is not null
),

microbatches as (
    {{ first_match(
        'microbatch_candidates',
        ['trace_id', 'slice_id'],
        ['phase_order asc', 'microbatch desc', 'step_slice_id asc'],
    ) }}
),

{# Phase and microbatch in one narrow row per kernel that has a step frame,
   so the wide kernel rows are joined once. #}
kernel_steps as (
    select
        phases.trace_id,
        phases.slice_id,
        phases.phase,
        phases.phase_group_kind,
        microbatches.microbatch,
        microbatches.step_slice_id
    from phases
    left join microbatches
        on
            phases.trace_id = microbatches.trace_id
            and phases.slice_id = microbatches.slice_id
),

{# Plain PyTorch (a trace without Megatron step frames): torch's own
   signals, seed torch_phase_patterns. #}
megatron_traces as (
    select distinct trace_id
    from step_frames
),

torch_patterns as (
    select
        pattern_id,
        priority,
        phase,
        source,
        pattern
    from {{ ref('torch_phase_patterns') }}
),

annotation_ranges as (
    select
        trace_id,
        slice_id,
        name,
        lineage_range_ids
    from {{ ref('int_annotation_ranges_nested') }}
    where {{ new_traces }}
),

backward_threads as (
    select
        trace_id,
        track_id,
        phase,
        pattern_id
    from {{ ref('int_backward_threads_found') }}
    where {{ new_traces }}
),

torch_launched as (
    select launched.*
    from launched
    where launched.trace_id not in (select megatron_traces.trace_id from megatron_traces)
),

{# The ranges a pattern names (Optimizer.step#AdamW.step), and every range
   inside one of them (its lineage holds it). #}
{# Each distinct name matched once, then joined back by name: a pattern held
   in a column is compiled for every pair it is tried on, and NVTX repeats a
   few names a million times. #}
named_patterns as (
    select
        distinct_names.name,
        torch_patterns.phase,
        torch_patterns.pattern_id,
        torch_patterns.priority
    from (select distinct annotation_ranges.name from annotation_ranges) as distinct_names
    inner join torch_patterns
        on
            torch_patterns.source = 'annotation'
            and {{ regex_matches('distinct_names.name', 'torch_patterns.pattern') }}
),

named_ranges as (
    select
        annotation_ranges.trace_id,
        annotation_ranges.slice_id,
        named_patterns.phase,
        named_patterns.pattern_id,
        named_patterns.priority
    from annotation_ranges
    inner join named_patterns
        on annotation_ranges.name = named_patterns.name
),

range_candidates as (
    select
        annotation_ranges.trace_id,
        annotation_ranges.slice_id,
        named_ranges.phase,
        named_ranges.pattern_id,
        named_ranges.priority
    from annotation_ranges
    inner join named_ranges
        on
            annotation_ranges.trace_id = named_ranges.trace_id
            and {{ array_has('annotation_ranges.lineage_range_ids', 'named_ranges.slice_id') }}
),

torch_candidates as (
    select
        torch_launched.trace_id,
        torch_launched.slice_id,
        range_candidates.phase,
        range_candidates.pattern_id,
        range_candidates.priority
    from torch_launched
    inner join range_candidates
        on
            torch_launched.trace_id = range_candidates.trace_id
            and torch_launched.annotation_slice_id = range_candidates.slice_id
    union all
    select
        torch_launched.trace_id,
        torch_launched.slice_id,
        backward_threads.phase,
        backward_threads.pattern_id,
        torch_patterns.priority
    from torch_launched
    inner join backward_threads
        on
            torch_launched.trace_id = backward_threads.trace_id
            and torch_launched.launch_track_id = backward_threads.track_id
    inner join torch_patterns
        on backward_threads.pattern_id = torch_patterns.pattern_id
),

torch_matches as (
    {{ first_match('torch_candidates', ['trace_id', 'slice_id'], ['priority', 'pattern_id']) }}
),

{# Forward: what the step's own threads launch before its first backward
   launch (all of it in a step without backward: inference). #}
first_backward_launches as (
    select
        torch_launched.trace_id,
        torch_launched.iteration,
        min(torch_launched.launch_ts_ns) as first_backward_launch_ns
    from torch_launched
    inner join backward_threads
        on
            torch_launched.trace_id = backward_threads.trace_id
            and torch_launched.launch_track_id = backward_threads.track_id
    where backward_threads.phase = 'backward'
    group by 1, 2
),

torch_phases as (
    select
        torch_launched.trace_id,
        torch_launched.slice_id,
        case
            when torch_matches.phase is not null then torch_matches.phase
            when
                torch_launched.iteration is not null
                and torch_launched.category <> 'gpu_memcpy'
                and (
                    first_backward_launches.first_backward_launch_ns is null
                    or torch_launched.launch_ts_ns
                    < first_backward_launches.first_backward_launch_ns
                )
                then 'forward'
        end as phase
    from torch_launched
    left join torch_matches
        on
            torch_launched.trace_id = torch_matches.trace_id
            and torch_launched.slice_id = torch_matches.slice_id
    left join first_backward_launches
        on
            torch_launched.trace_id = first_backward_launches.trace_id
            and torch_launched.iteration = first_backward_launches.iteration
),

{# Megatron and plain PyTorch traces are disjoint (torch_launched leaves
   out every trace with a step frame): one row per kernel. #}
final as (
    select
        trace_id,
        slice_id,
        phase,
        phase_group_kind,
        microbatch,
        step_slice_id
    from kernel_steps
    union all
    select
        trace_id,
        slice_id,
        phase,
        null as phase_group_kind,
        null as microbatch,
        null as step_slice_id
    from torch_phases
    where phase is not null
)

select * from final
