{#
    One row per annotation range (trace_id, slice_id): every Kineto user
    annotation (torch.profiler.record_function, Megatron's and torch's own
    ranges, `ProfilerStep#N`) and every Nsight NVTX push/pop range (macro
    annotation_range_slices; `gpu_user_annotation` rows are GPU projections of
    user annotations, not ranges: see the macro), nested into a tree.

    A range's ancestors are the ranges of its thread that hold its time and
    come before it in ingest's nesting order (start, longest first, then
    slice id: ingest/nesting.py sorts so and slice ids follow the file), so
    identical ranges nest as ingest nests them, the earlier outside.
    parent_range_id: the innermost ancestor, the last in that order;
    annotation_depth: the ancestors (0 at the top); annotation_path: their
    names and its own, outermost first, joined by ' > ';
    lineage_range_ids: their slice ids and its own (an array, in no set
    order), what int_kernels_annotated climbs to find a launch's innermost
    range and int_annotation_ranges_projected sums kernels over. A
    self-join among one thread's ranges only (hundreds, not its millions of
    slices), so no recursive walk. The one read of the ranges from the lake:
    int_kernels_annotated reads them here. Per trace (macros/per_trace.sql):
    delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}
{%- set range_columns = [
    'run_id', 'rank', 'trace_id', 'slice_id', 'track_id',
    annotation_kind() ~ ' as annotation_kind', 'name', 'ts_ns', 'dur_ns', 'end_ns',
] %}

with

ranges as (
    select * from {{ annotation_range_slices(pending, range_columns) }} as scanned  -- noqa: AM04
),

{# Every (range, ancestor-or-self) pair: the ancestor holds the range's time
   and comes first in ingest's order (a tie, identical times, goes to the
   lower slice id). #}
lineage as (
    select
        inner_range.trace_id,
        inner_range.slice_id,
        outer_range.slice_id as ancestor_id,
        outer_range.name as ancestor_name,
        outer_range.ts_ns as ancestor_ts_ns,
        outer_range.end_ns as ancestor_end_ns
    from ranges as inner_range
    inner join ranges as outer_range
        on
            inner_range.trace_id = outer_range.trace_id
            and inner_range.track_id = outer_range.track_id
            and inner_range.ts_ns >= outer_range.ts_ns
            and inner_range.end_ns <= outer_range.end_ns
            and (
                inner_range.ts_ns > outer_range.ts_ns
                or inner_range.end_ns < outer_range.end_ns
                or inner_range.slice_id >= outer_range.slice_id
            )
),

tree as (
    select
        trace_id,
        slice_id,
        count(*) - 1 as annotation_depth,
        {{ collect_array('ancestor_id') }} as lineage_range_ids,
        {{ string_agg_ordered(
            'ancestor_name', "' > '", 'ancestor_ts_ns asc, ancestor_end_ns desc, ancestor_id asc') }}
            as annotation_path
    from lineage
    group by 1, 2
),

ancestors as (
    select * from lineage  -- noqa: AM04
    where ancestor_id <> slice_id
),

{# The innermost ancestor: the last before it in ingest's order. #}
parents as (
    {{ first_match(
        'ancestors',
        ['trace_id', 'slice_id'],
        ['ancestor_ts_ns desc', 'ancestor_end_ns asc', 'ancestor_id desc'],
    ) }}
),

final as (
    select
        ranges.run_id,
        ranges.rank,
        ranges.trace_id,
        ranges.slice_id,
        ranges.annotation_kind,
        parents.ancestor_id as parent_range_id,
        ranges.track_id,
        ranges.name,
        tree.annotation_depth,
        tree.annotation_path,
        ranges.ts_ns,
        ranges.dur_ns,
        ranges.end_ns,
        tree.lineage_range_ids
    from ranges
    inner join tree
        on
            ranges.trace_id = tree.trace_id
            and ranges.slice_id = tree.slice_id
    left join parents
        on
            ranges.trace_id = parents.trace_id
            and ranges.slice_id = parents.slice_id
)

select * from final
