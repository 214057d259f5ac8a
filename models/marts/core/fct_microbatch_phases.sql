{#
    One row per run x rank x iteration x phase x microbatch (microbatch NULL
    for phases outside forward/backward steps): Megatron-TraceViz's per-MBS
    view. wall = last end - first start of the group's kernels; compute,
    communication = union lengths; overlap = their intersection (macros
    merge_intervals and sweep_overlap, as fct_rank_iterations).

    Traces without GPU work (e.g. CPU-only captures) get CPU-side timings
    instead (timing_source = 'cpu'): wall and busy of the outermost Megatron
    step frames of each phase and microbatch; the kernel columns are NULL.

    vpp_chunk and chunk_microbatch (Megatron's microbatch id within the
    chunk) come with the microbatch: from the kernels (fct_kernels) or the
    step frames (int_microbatch_steps_chunked). They are functions of the
    microbatch's step, so they do not change the grain.
    A table rebuilt each time from the kernels of every loaded trace.
#}

with

kernels as (
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        kind,
        ts_ns,
        end_ns
    from {{ ref('fct_kernels') }}
),

kernel_traces as (
    select distinct trace_id from {{ ref('fct_kernels') }}
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
        sum(busy_ns) as busy_ns,
        cast(null as bigint) as compute_ns,
        cast(null as bigint) as communication_ns,
        cast(null as bigint) as memory_ns,
        cast(null as bigint) as overlap_ns
    from cpu_islands
    group by 1, 2, 3, 4, 5, 6, 7
),

intervals as (
    select * from kernels
    union all
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        'all' as kind,
        ts_ns,
        end_ns
    from kernels
),

islands as (
    {{ merge_intervals(
        'intervals',
        ['run_id', 'rank', 'iteration', 'phase', 'microbatch', 'vpp_chunk', 'chunk_microbatch', 'kind'],
        'ts_ns',
        'end_ns',
    ) }}
),

overlap_totals as (
    {{ sweep_overlap(
        'islands',
        ['run_id', 'rank', 'iteration', 'phase', 'microbatch', 'vpp_chunk', 'chunk_microbatch'],
    ) }}
),

unions as (
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        min(case when kind = 'all' then start_ns end) as first_start_ns,
        max(case when kind = 'all' then end_ns end) as last_end_ns,
        sum(case when kind = 'all' then interval_count else 0 end) as kernel_count,
        sum(case when kind = 'all' then busy_ns else 0 end) as busy_ns,
        sum(case when kind = 'compute' then busy_ns else 0 end) as compute_ns,
        sum(case when kind = 'communication' then busy_ns else 0 end) as communication_ns,
        sum(case when kind = 'memory' then busy_ns else 0 end) as memory_ns
    from islands
    group by 1, 2, 3, 4, 5, 6, 7
),

gpu_timings as (
    select
        unions.run_id,
        unions.rank,
        unions.iteration,
        unions.phase,
        unions.microbatch,
        unions.vpp_chunk,
        unions.chunk_microbatch,
        'gpu' as timing_source,
        unions.kernel_count,
        unions.first_start_ns,
        unions.last_end_ns,
        unions.last_end_ns - unions.first_start_ns as wall_ns,
        unions.busy_ns,
        unions.compute_ns,
        unions.communication_ns,
        unions.memory_ns,
        coalesce(overlap_totals.overlap_ns, 0) as overlap_ns
    from unions
    left join overlap_totals
        on
            unions.run_id = overlap_totals.run_id
            and unions.rank = overlap_totals.rank
            and unions.iteration is not distinct from overlap_totals.iteration
            and unions.phase = overlap_totals.phase
            and unions.microbatch is not distinct from overlap_totals.microbatch
            and unions.vpp_chunk is not distinct from overlap_totals.vpp_chunk
            and unions.chunk_microbatch is not distinct from overlap_totals.chunk_microbatch
),

final as (
    select * from gpu_timings
    union all
    select * from cpu_timings
)

select * from final
