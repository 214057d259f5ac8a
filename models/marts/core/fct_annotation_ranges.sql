{#
    One row per annotation range (run_id, rank, trace_id, slice_id): what is
    inside a Kineto user annotation (torch.profiler.record_function,
    Megatron's ranges, ProfilerStep#N) or an Nsight NVTX push/pop range
    (annotation_kind), as a tree: parent, depth, path, its own CPU span and
    its span projected onto the GPU over the kernels launched inside it or
    a descendant. int_annotation_ranges_nested (the tree) and
    int_annotation_ranges_projected (the GPU side) compute them and
    document the rules; the rank's coordinates come from dim_ranks (macro
    rank_coordinates). A view on DuckDB, a table elsewhere (macro
    lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

ranges as (
    select * from {{ ref('int_annotation_ranges_nested') }}  -- noqa: AM04
),

projected as (
    select * from {{ ref('int_annotation_ranges_projected') }}  -- noqa: AM04
),

ranks as (
    select * from {{ ref('dim_ranks') }}  -- noqa: AM04
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        {{ rank_coordinates('ranks') }},
        ranges.trace_id,
        ranges.slice_id,
        ranges.annotation_kind,
        ranges.parent_range_id,
        ranges.track_id,
        ranges.tid,
        ranges.thread_name,
        ranges.name,
        ranges.annotation_depth,
        ranges.annotation_path,
        ranges.ts_ns,
        ranges.dur_ns,
        ranges.end_ns,
        coalesce(projected.kernel_count, 0) as kernel_count,
        coalesce(projected.own_kernel_count, 0) as own_kernel_count,
        projected.gpu_start_ns,
        projected.gpu_end_ns,
        projected.gpu_end_ns - projected.gpu_start_ns as gpu_span_ns
    from ranges
    left join projected
        on
            ranges.trace_id = projected.trace_id
            and ranges.slice_id = projected.slice_id
    left join ranks
        on
            ranges.run_id = ranks.run_id
            and ranges.rank = ranks.rank
)

select * from final
