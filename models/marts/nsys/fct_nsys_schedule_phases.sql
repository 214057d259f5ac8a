{#
    One row per NVTX range of an Nsight Systems trace that marks a pipeline
    schedule phase (trace_id, slice_id): megatron-core's warmup, steady,
    cooldown and misc ranges of the interleaved 1F1B schedule and its
    "<name> forward"/"<name> backward" ranges, as matched by
    seeds/nsys_phase_markers.csv (the best-priority pattern wins). Each
    phase carries the range's CPU interval and its GPU projection from
    fct_annotation_ranges (its NVTX rows: kernels launched inside it or a
    descendant; read there, so `tracehouse nsys`, which builds the Nsight
    marts and what they read, builds that mart too).
    Empty for exports without such ranges (Megatron-LM --nvtx-ranges off).
#}

with

ranges as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        annotation_depth as nvtx_depth,
        annotation_path as nvtx_path,
        ts_ns,
        end_ns,
        kernel_count,
        gpu_start_ns,
        gpu_end_ns,
        gpu_span_ns
    from {{ ref('fct_annotation_ranges') }}
    where annotation_kind = 'nvtx'
),

markers as (
    select
        priority,
        phase,
        pattern
    from {{ ref('nsys_phase_markers') }}
),

matched as (
    select
        ranges.trace_id,
        ranges.slice_id,
        min_by(markers.phase, markers.priority) as phase
    from ranges
    inner join markers
        on {{ regex_matches('ranges.name', 'markers.pattern') }}
    group by 1, 2
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        ranges.trace_id,
        ranges.slice_id,
        matched.phase,
        ranges.name,
        ranges.nvtx_depth,
        ranges.nvtx_path,
        ranges.ts_ns as cpu_start_ns,
        ranges.end_ns as cpu_end_ns,
        ranges.kernel_count,
        ranges.gpu_start_ns,
        ranges.gpu_end_ns,
        ranges.gpu_span_ns
    from ranges
    inner join matched
        on
            ranges.trace_id = matched.trace_id
            and ranges.slice_id = matched.slice_id
)

select * from final
