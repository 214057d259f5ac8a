{#
    One row per run x rank x trace x iteration with microbatch work: the
    pipeline stage's own work in that iteration, as fct_pipeline_bubbles
    needs it (its docs define the work and busy time).

    Work on GPU traces: the compute and memory kernels of the forward,
    backward and recompute phases; on traces without kernels
    (timing_source = 'cpu'): the outermost forward and backward step
    frames. busy_ns = length of the union of that work (merge_intervals).
    Everything here is the trace's own (kind, phase and iteration of
    int_kernels_classified, step frames of int_cpu_steps_classified), so it
    is kept per trace (materialized per_trace, keyed by trace_id) and
    fct_pipeline_bubbles sums a rank's traces, as fct_rank_iterations does:
    the kernels of one rank and iteration lie in one trace
    (int_kernel_intervals_merged says why). Merging every kernel of the
    run on each build cost 0.6 s at 256 ranks x 2 iterations and 7.5 s
    (9.6 s in a +1 build) at 1,024 x 4 (benchmarks/README.md).
#}

{%- set pending = traces_pending() %}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        phase,
        kind,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where {{ trace_filter(pending, 'trace_id') }}
),

step_frames as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        phase,
        is_outermost,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where {{ trace_filter(pending, 'trace_id') }}
),

kernel_traces as (
    select distinct trace_id from kernels
),

gpu_work as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        'gpu' as timing_source,
        ts_ns,
        end_ns
    from kernels
    where
        kind <> 'communication'
        and phase in ('forward', 'backward', 'recompute')
        and iteration is not null
),

cpu_work as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        'cpu' as timing_source,
        ts_ns,
        end_ns
    from step_frames
    where
        is_outermost
        and phase in ('forward', 'backward')
        and iteration is not null
        and trace_id not in (select kernel_traces.trace_id from kernel_traces)
),

work as (
    select * from gpu_work
    union all
    select * from cpu_work
),

islands as (
    {{ merge_intervals(
        'work',
        ['trace_id', 'iteration', 'timing_source'],
        'ts_ns',
        'end_ns',
        carry=['run_id', 'rank'],
    ) }}
),

final as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        timing_source,
        min(start_ns) as stage_start_ns,
        max(end_ns) as stage_end_ns,
        cast(sum(busy_ns) as bigint) as busy_ns,
        cast(sum(interval_count) as bigint) as work_count
    from islands
    group by 1, 2, 3, 4, 5
)

select * from final
