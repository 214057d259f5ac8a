{#
    One row per annotation range (trace_id, slice_id): every Kineto user
    annotation (torch.profiler.record_function, Megatron's and torch's own
    ranges, `ProfilerStep#N`) and every Nsight NVTX push/pop range (macro
    is_annotation_range; `gpu_user_annotation` rows are GPU projections of
    user annotations, not ranges: see the macro), nested into a tree.

    parent_range_id: the nearest annotation above it on its thread, along
    ingest's parent links through whatever lies between (Python frames,
    operators; macro nearest_annotations); annotation_depth: the ranges
    above it (0 at the top); annotation_path: their names and its own,
    outermost first, joined by ' > '. GPU projection: the kernels (category
    `kernel`; copies and fills left out, as nsys-ai counts) whose launch
    call lies inside the range or one of its descendants
    (int_kernels_annotated: the innermost range of each launch);
    kernel_count counts them, own_kernel_count those whose innermost range
    it is, gpu_start_ns / gpu_end_ns are the first start and last end
    (NULL without kernels). On an Nsight trace a kernel counts only inside
    the capture window of `tracehouse nsys --trim` (macro
    in_nsys_capture_window; the whole capture otherwise), as the other
    Nsight views count. Per trace (macros/per_trace.sql): delete+insert on
    trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}

with recursive

ranges as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        parent_id,
        track_id,
        {{ annotation_kind() }} as annotation_kind,
        name,
        ts_ns,
        dur_ns,
        end_ns
    from {{ lake_scan('slices', pending) }}
    where
        category in ('user_annotation', 'nvtx')
        and {{ is_annotation_range() }}
        and {{ trace_filter(pending) }}
),

cpu_slices as (
    select * from {{ annotated_cpu_slices(pending) }} as flagged  -- noqa: AM04
),

starts as (
    select
        trace_id,
        slice_id,
        parent_id as from_id
    from ranges
),

parents as (
    select
        trace_id,
        slice_id,
        annotation_slice_id as parent_range_id
    from {{ nearest_annotations('starts', 'cpu_slices') }} as nearest
),

tree as (
    select
        ranges.trace_id,
        ranges.slice_id,
        ranges.name,
        parents.parent_range_id
    from ranges
    left join parents
        on
            ranges.trace_id = parents.trace_id
            and ranges.slice_id = parents.slice_id
),

{# Every (range, ancestor-or-self) pair, with the ancestor's distance. #}
lineage as (
    select
        trace_id,
        slice_id,
        slice_id as ancestor_id,
        parent_range_id as next_id,
        0 as distance
    from tree
    union all
    select
        lineage.trace_id,
        lineage.slice_id,
        tree.slice_id as ancestor_id,
        tree.parent_range_id as next_id,
        lineage.distance + 1 as distance
    from lineage
    inner join tree
        on
            lineage.trace_id = tree.trace_id
            and lineage.next_id = tree.slice_id
),

paths as (
    select
        lineage.trace_id,
        lineage.slice_id,
        count(*) - 1 as annotation_depth,
        {{ string_agg_ordered('tree.name', "' > '", 'lineage.distance desc') }}
            as annotation_path
    from lineage
    inner join tree
        on
            lineage.trace_id = tree.trace_id
            and lineage.ancestor_id = tree.slice_id
    group by 1, 2
),

traces as (
    select
        trace_id,
        file_format,
        base_time_ns
    from {{ ref('int_traces') }}
    where {{ trace_filter(pending) }}
),

kernels as (
    select
        annotated.trace_id,
        annotated.annotation_slice_id,
        annotated.ts_ns,
        annotated.end_ns
    from {{ ref('int_kernels_annotated') }} as annotated
    inner join traces
        on annotated.trace_id = traces.trace_id
    where
        annotated.category = 'kernel'
        and (
            traces.file_format <> '{{ var("nsys_file_format") }}'
            or {{ in_nsys_capture_window(
                'annotated.ts_ns', 'annotated.end_ns', 'traces.base_time_ns') }}
        )
        and {{ trace_filter(pending, 'annotated.trace_id') }}
),

projected as (
    select
        lineage.trace_id,
        lineage.ancestor_id as slice_id,
        count(*) as kernel_count,
        count(*) filter (where lineage.distance = 0) as own_kernel_count,
        min(kernels.ts_ns) as gpu_start_ns,
        max(kernels.end_ns) as gpu_end_ns
    from kernels
    inner join lineage
        on
            kernels.trace_id = lineage.trace_id
            and kernels.annotation_slice_id = lineage.slice_id
    group by 1, 2
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        ranges.trace_id,
        ranges.slice_id,
        ranges.annotation_kind,
        tree.parent_range_id,
        ranges.track_id,
        ranges.name,
        paths.annotation_depth,
        paths.annotation_path,
        ranges.ts_ns,
        ranges.dur_ns,
        ranges.end_ns,
        coalesce(projected.kernel_count, 0) as kernel_count,
        coalesce(projected.own_kernel_count, 0) as own_kernel_count,
        projected.gpu_start_ns,
        projected.gpu_end_ns,
        projected.gpu_end_ns - projected.gpu_start_ns as gpu_span_ns
    from ranges
    inner join paths
        on
            ranges.trace_id = paths.trace_id
            and ranges.slice_id = paths.slice_id
    inner join tree
        on
            ranges.trace_id = tree.trace_id
            and ranges.slice_id = tree.slice_id
    left join projected
        on
            ranges.trace_id = projected.trace_id
            and ranges.slice_id = projected.slice_id
)

select * from final
