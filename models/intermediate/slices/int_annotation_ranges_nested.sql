{#
    One row per annotation range (trace_id, slice_id): every Kineto user
    annotation (torch.profiler.record_function, Megatron's and torch's own
    ranges, `ProfilerStep#N`) and every Nsight NVTX push/pop range, nested
    into a tree (macro annotation_range_slices: the one read of ranges).

    The tree is ingest's (ingest/annotation_context.py): a range's
    ancestors are the ranges on its parent chain (ingest/nesting.py: the
    deepest slice of its thread that wholly holds it, identical slices the
    earlier outside). parent_range_id: the innermost ancestor;
    annotation_depth: the number of ancestors (0 at the top);
    lineage_range_ids: their slice ids and its own, outermost first;
    annotation_path: their names and its own in that order, joined by
    ' > '. Per trace (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}

with

ranges as (
    select * from {{ annotation_range_slices(pending) }} as scanned  -- noqa: AM04
),

{# Every (range, ancestor-or-self) pair, with the ancestor's place in the lineage. #}
lineage as (
    select
        trace_id,
        slice_id,
        {{ explode_with_position('lineage_range_ids', 'ancestor_id', 'lineage_position') }}
    from ranges
),

paths as (
    select
        lineage.trace_id,
        lineage.slice_id,
        {{ string_agg_ordered('ancestors.name', "' > '", 'lineage.lineage_position') }}
            as annotation_path
    from lineage
    inner join ranges as ancestors
        on
            lineage.trace_id = ancestors.trace_id
            and lineage.ancestor_id = ancestors.slice_id
    group by 1, 2
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        ranges.trace_id,
        ranges.slice_id,
        ranges.annotation_kind,
        ranges.parent_range_id,
        ranges.track_id,
        ranges.name,
        {{ array_length('ranges.lineage_range_ids') }} - 1 as annotation_depth,
        paths.annotation_path,
        ranges.ts_ns,
        ranges.dur_ns,
        ranges.end_ns,
        ranges.lineage_range_ids
    from ranges
    inner join paths
        on
            ranges.trace_id = paths.trace_id
            and ranges.slice_id = paths.slice_id
)

select * from final
