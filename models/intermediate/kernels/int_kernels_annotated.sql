{#
    One row per GPU kernel, copy or fill of int_kernels_classified
    (trace_id, slice_id; so the capture window applies) whose launch call
    lies inside an annotation range (macro annotation_range_slices: a Kineto
    user annotation or an Nsight NVTX push/pop range): `annotation_slice_id`,
    the innermost one. Work launched outside every range has no row.

    The ranges around a launch are those of its thread whose time holds the
    launch call (what nsys-ai's nvtx_kernel_map and a Kineto viewer show);
    the innermost is the last of them in ingest's nesting order (latest
    start, then shortest, then highest slice id: ingest/nesting.py's order,
    so identical ranges nest as ingest nests them). Found in two steps,
    without comparing a launch to every range of its thread: the last range
    in that order starting at or before the launch (macro
    latest_at_or_before: an ASOF join on DuckDB) is the answer when it holds
    the launch; else every range holding the launch holds that range too (it
    ends before the launch does, and they start no later), so the answer is
    the last of its ancestors holding the launch: its parent (the last
    ancestor) when that holds it, else found among all its ancestors
    (int_annotation_ranges_nested's lineage_range_ids). The ranges come from
    int_annotation_ranges_nested, not the lake. Per trace
    (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}
{%- set kernel_columns = ['trace_id', 'slice_id', 'category', 'ts_ns', 'end_ns'] %}

with

launched as (
    select
        trace_id,
        slice_id,
        category,
        launch_track_id,
        launch_ts_ns,
        launch_end_ns,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where
        launch_ts_ns is not null
        and {{ trace_filter(pending) }}
),

ranges as (
    select
        trace_id,
        slice_id,
        track_id,
        ts_ns,
        end_ns,
        parent_range_id,
        lineage_range_ids
    from {{ ref('int_annotation_ranges_nested') }}
    where {{ trace_filter(pending) }}
),

{# Of the ranges starting together on a thread, the last in ingest's order
   (the shortest, then the highest slice id): the others hold it. #}
openings as (
    {{ first_match(
        'ranges',
        ['trace_id', 'track_id', 'ts_ns'],
        ['end_ns asc', 'slice_id desc'],
    ) }}
),

latest as (
    {{ latest_at_or_before(
        'launched', 'openings',
        [['trace_id', 'trace_id'], ['launch_track_id', 'track_id']],
        'launch_ts_ns', 'ts_ns', ['trace_id', 'slice_id'],
        [
            'launched.trace_id', 'launched.slice_id', 'launched.category',
            'launched.launch_end_ns', 'launched.ts_ns', 'launched.end_ns',
            'openings.slice_id as latest_slice_id',
            'openings.end_ns as latest_end_ns',
            'openings.parent_range_id as latest_parent_id',
            'openings.lineage_range_ids',
        ],
    ) }}
),

{# Launches outside the latest range, with its parent: the last of its
   ancestors in ingest's order, so the answer when it holds the launch. #}
outside_latest as (
    select
        latest.trace_id,
        latest.slice_id,
        latest.category,
        latest.launch_end_ns,
        latest.ts_ns,
        latest.end_ns,
        latest.latest_parent_id,
        latest.lineage_range_ids,
        parents.end_ns as parent_end_ns
    from latest
    inner join ranges as parents
        on
            latest.trace_id = parents.trace_id
            and latest.latest_parent_id = parents.slice_id
    where latest.launch_end_ns > latest.latest_end_ns
),

{# Launches outside the parent too: every ancestor, each with its time. #}
climbing as (
    select
        trace_id,
        slice_id,
        category,
        launch_end_ns,
        ts_ns,
        end_ns,
        {{ explode_with_position('lineage_range_ids', 'annotation_slice_id', 'lineage_position') }}
    from outside_latest
    where launch_end_ns > parent_end_ns
),

enclosing as (
    select
        climbing.trace_id,
        climbing.slice_id,
        climbing.category,
        climbing.ts_ns,
        climbing.end_ns,
        climbing.annotation_slice_id,
        ranges.ts_ns as range_ts_ns,
        ranges.end_ns as range_end_ns
    from climbing
    inner join ranges
        on
            climbing.trace_id = ranges.trace_id
            and climbing.annotation_slice_id = ranges.slice_id
    where climbing.launch_end_ns <= ranges.end_ns
),

innermost as (
    {{ first_match(
        'enclosing',
        ['trace_id', 'slice_id'],
        ['range_ts_ns desc', 'range_end_ns asc', 'annotation_slice_id desc'],
    ) }}
),

final as (
    select
        {{ kernel_columns | join(', ') }},
        latest_slice_id as annotation_slice_id
    from latest
    where launch_end_ns <= latest_end_ns
    union all
    select
        {{ kernel_columns | join(', ') }},
        latest_parent_id as annotation_slice_id
    from outside_latest
    where launch_end_ns <= parent_end_ns
    union all
    select
        {{ kernel_columns | join(', ') }},
        annotation_slice_id
    from innermost
)

select * from final
