{#
    One row per run x rank x iteration x phase x microbatch (microbatch NULL
    for phases outside forward/backward steps): Megatron-TraceViz's per-MBS
    view, which fct_microbatch_phases shows. wall = last end - first start
    of the group's kernels; compute, communication = union lengths; overlap
    = their intersection (macros merge_intervals and sweep_overlap, per
    trace in int_microbatch_phases_swept).

    Traces without GPU work (e.g. CPU-only captures) get CPU-side timings
    instead (timing_source = 'cpu'): wall and busy of the outermost Megatron
    step frames of each phase and microbatch; the kernel columns are NULL.

    vpp_chunk and chunk_microbatch (Megatron's microbatch id within the
    chunk) come with the microbatch from the run's lookup
    (int_microbatch_steps_chunked), keyed by the microbatch's step. They are
    functions of that step, so they do not change the grain.
    A table rebuilt each time, but from the per-trace kernel timings of
    int_microbatch_phases_swept (which merges the kernels once per trace),
    summed over a rank's traces (they hold disjoint profiling windows).
#}

with

gpu_groups as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        phase,
        microbatch,
        step_slice_id,
        kernel_count,
        first_start_ns,
        last_end_ns,
        busy_ns,
        compute_ns,
        communication_ns,
        memory_ns,
        overlap_ns
    from {{ ref('int_microbatch_phases_swept') }}
),

kernel_traces as (
    select distinct trace_id from gpu_groups
),

step_frames as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        phase,
        microbatch,
        is_outermost,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
),

step_chunks as (
    select
        trace_id,
        slice_id,
        vpp_chunk,
        chunk_microbatch
    from {{ ref('int_microbatch_steps_chunked') }}
),

cpu_only_frames as (
    select
        step_frames.run_id,
        step_frames.rank,
        step_frames.iteration,
        step_frames.phase,
        step_frames.microbatch,
        step_chunks.vpp_chunk,
        step_chunks.chunk_microbatch,
        step_frames.ts_ns,
        step_frames.end_ns
    from step_frames
    left join step_chunks
        on
            step_frames.trace_id = step_chunks.trace_id
            and step_frames.slice_id = step_chunks.slice_id
    where
        step_frames.is_outermost
        and step_frames.trace_id not in (select kernel_traces.trace_id from kernel_traces)
),

cpu_islands as (
    {{ merge_intervals(
        'cpu_only_frames',
        ['run_id', 'rank', 'iteration', 'phase', 'microbatch', 'vpp_chunk', 'chunk_microbatch'],
        'ts_ns',
        'end_ns',
    ) }}
),

cpu_timings as (
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        'cpu' as timing_source,
        cast(0 as bigint) as kernel_count,
        min(start_ns) as first_start_ns,
        max(end_ns) as last_end_ns,
        max(end_ns) - min(start_ns) as wall_ns,
        cast(sum(busy_ns) as bigint) as busy_ns,
        cast(null as bigint) as compute_ns,
        cast(null as bigint) as communication_ns,
        cast(null as bigint) as memory_ns,
        cast(null as bigint) as overlap_ns
    from cpu_islands
    group by 1, 2, 3, 4, 5, 6, 7
),

gpu_timings as (
    select
        gpu_groups.run_id,
        gpu_groups.rank,
        gpu_groups.iteration,
        gpu_groups.phase,
        gpu_groups.microbatch,
        step_chunks.vpp_chunk,
        step_chunks.chunk_microbatch,
        'gpu' as timing_source,
        cast(sum(gpu_groups.kernel_count) as bigint) as kernel_count,
        min(gpu_groups.first_start_ns) as first_start_ns,
        max(gpu_groups.last_end_ns) as last_end_ns,
        max(gpu_groups.last_end_ns) - min(gpu_groups.first_start_ns) as wall_ns,
        cast(sum(gpu_groups.busy_ns) as bigint) as busy_ns,
        cast(sum(gpu_groups.compute_ns) as bigint) as compute_ns,
        cast(sum(gpu_groups.communication_ns) as bigint) as communication_ns,
        cast(sum(gpu_groups.memory_ns) as bigint) as memory_ns,
        cast(sum(gpu_groups.overlap_ns) as bigint) as overlap_ns
    from gpu_groups
    left join step_chunks
        on
            gpu_groups.trace_id = step_chunks.trace_id
            and gpu_groups.step_slice_id = step_chunks.slice_id
    group by 1, 2, 3, 4, 5, 6, 7
),

final as (
    select * from gpu_timings
    union all
    select * from cpu_timings
)

select * from final
