{#
    One row per NVTX push/pop range of an Nsight Systems trace
    (trace_id, slice_id): the NVTX tree. `parent_range_id` is the enclosing
    range on the same thread, `nvtx_depth` the number of enclosing ranges,
    `nvtx_path` their names and its own, outermost first, joined by ' > '.
    The GPU-projected span covers every kernel launched inside the range
    or one of its descendants (fct_nsys_kernel_nvtx): gpu_start_ns = first
    kernel start, gpu_end_ns = last kernel end; NULL when none.
#}

{#- The Nsight traces, read once: the lake scan reads only their files, and
    none at all on a warehouse of Kineto traces (macros/per_trace.sql,
    macros/lake_scan.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with recursive

ranges as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        parent_id,
        track_id,
        name,
        ts_ns,
        dur_ns,
        end_ns
    from {{ lake_scan('slices', nsys_traces) }}
    where
        {{ is_nvtx_push_pop_range() }}
        and {{ trace_filter(nsys_traces) }}
),

kernel_ranges as (
    select
        trace_id,
        nvtx_slice_id,
        ts_ns,
        end_ns
    from {{ ref('fct_nsys_kernel_nvtx') }}
    where nvtx_slice_id is not null
),

{# Every (range, ancestor-or-self) pair, with the ancestor's distance. #}
lineage as (
    select
        trace_id,
        slice_id,
        slice_id as ancestor_id,
        parent_id as next_id,
        0 as distance
    from ranges
    union all
    select
        lineage.trace_id,
        lineage.slice_id,
        ranges.slice_id as ancestor_id,
        ranges.parent_id as next_id,
        lineage.distance + 1 as distance
    from lineage
    inner join ranges
        on
            lineage.trace_id = ranges.trace_id
            and lineage.next_id = ranges.slice_id
),

paths as (
    select
        lineage.trace_id,
        lineage.slice_id,
        count(*) - 1 as nvtx_depth,
        {{ string_agg_ordered('ranges.name', "' > '", 'lineage.distance desc') }} as nvtx_path,
        max(case when lineage.distance = 1 then lineage.ancestor_id end) as parent_range_id
    from lineage
    inner join ranges
        on
            lineage.trace_id = ranges.trace_id
            and lineage.ancestor_id = ranges.slice_id
    group by 1, 2
),

projected as (
    select
        lineage.trace_id,
        lineage.ancestor_id as slice_id,
        count(*) as kernel_count,
        count(*) filter (where lineage.distance = 0) as own_kernel_count,
        min(kernel_ranges.ts_ns) as gpu_start_ns,
        max(kernel_ranges.end_ns) as gpu_end_ns
    from kernel_ranges
    inner join lineage
        on
            kernel_ranges.trace_id = lineage.trace_id
            and kernel_ranges.nvtx_slice_id = lineage.slice_id
    group by 1, 2
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        ranges.trace_id,
        ranges.slice_id,
        paths.parent_range_id,
        ranges.track_id,
        ranges.name,
        paths.nvtx_depth,
        paths.nvtx_path,
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
    left join projected
        on
            ranges.trace_id = projected.trace_id
            and ranges.slice_id = projected.slice_id
)

select * from final
