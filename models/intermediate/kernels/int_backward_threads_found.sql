{#
    One row per CPU thread (trace_id, track_id) whose ops say it runs a
    training phase of its own: the autograd engine's thread, whose ops are
    `autograd::engine::evaluate_function: XBackward0` (seed
    torch_phase_patterns, source `thread_op`; the lowest priority wins).
    PyTorch runs a backward pass on one such thread per device, so every
    kernel launched from it is backward work (int_kernels_classified), in
    plain PyTorch jobs whose trace has no Megatron step frames.

    Only a thread's top-level ops (depth 0) count: the engine's thread
    starts each task itself, so its engine ops have no parent, while the
    training loop's thread may run one inside its step (dlrm_8rank: an
    `AccumulateGrad` of a CPU-side leaf under `ProfilerStep#10`), and
    that thread's launches are not all backward.

    Why a thread, not the launch's own parent op: those ops are plain CPU
    ops, which ingest keeps out of the slices the models read
    (int_slices_contextualized, `has_role`), and walking each launch's
    parent chain would take a join per level. The thread needs only the
    distinct (thread, op name) pairs of the trace: one narrow scan of the
    slices' names. A thread's name (`pt_autograd_0`) is no signal: older
    torch names both threads after the process (dlrm_8rank).
    Per trace (materialized per_trace): keyed by trace_id.
#}

{%- set pending = traces_pending() %}

with

thread_ops as (
    select distinct
        trace_id,
        track_id,
        name
    from {{ lake_scan('slices', pending) }}
    where
        not is_gpu
        and depth = 0
        and {{ trace_filter(pending) }}
),

patterns as (
    select
        pattern_id,
        priority,
        phase,
        pattern
    from {{ ref('torch_phase_patterns') }}
    where source = 'thread_op'
),

op_names as (
    select distinct name
    from thread_ops
),

name_matches as (
    select
        op_names.name,
        patterns.phase,
        patterns.pattern_id,
        patterns.priority
    from op_names
    inner join patterns
        on {{ regex_matches('op_names.name', 'patterns.pattern') }}
),

thread_candidates as (
    select
        thread_ops.trace_id,
        thread_ops.track_id,
        name_matches.phase,
        name_matches.pattern_id,
        name_matches.priority
    from thread_ops
    inner join name_matches
        on thread_ops.name = name_matches.name
),

final as (
    select
        trace_id,
        track_id,
        phase,
        pattern_id
    from (
        {{ first_match('thread_candidates', ['trace_id', 'track_id'], ['priority', 'pattern_id']) }}
    ) as first_matches
)

select * from final
