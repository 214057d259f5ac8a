{#
    One row per GPU kernel, copy or fill of int_kernels_classified
    (trace_id, slice_id; so the capture window applies) whose launch call
    lies inside an annotation range (macro is_annotation_range: a Kineto
    user annotation or an Nsight NVTX push/pop range): `annotation_slice_id`,
    the innermost one. Work launched outside every range has no row.

    The ranges around a launch are those of its thread whose time holds the
    launch call (what nsys-ai's nvtx_kernel_map and a Kineto viewer show);
    the innermost is the last of them in ingest's nesting order (latest
    start, then shortest, then highest slice id: ingest/nesting.py's order,
    so identical ranges nest as ingest nests them). A time join on the
    thread against its few ranges, not a walk up the parent links of its
    many slices. int_annotation_ranges_nested projects the ranges onto
    these kernels. Per trace (macros/per_trace.sql): delete+insert on
    trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}
{%- set range_columns = ['trace_id', 'slice_id', 'track_id', 'ts_ns', 'end_ns'] %}

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
    select * from {{ annotation_range_slices(pending, range_columns) }} as scanned  -- noqa: AM04
),

enclosing as (
    select
        launched.trace_id,
        launched.slice_id,
        launched.category,
        launched.ts_ns,
        launched.end_ns,
        ranges.slice_id as annotation_slice_id,
        ranges.ts_ns as range_ts_ns,
        ranges.end_ns as range_end_ns
    from launched
    inner join ranges
        on
            launched.trace_id = ranges.trace_id
            and launched.launch_track_id = ranges.track_id
            and launched.launch_ts_ns >= ranges.ts_ns
            and launched.launch_end_ns <= ranges.end_ns
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
        trace_id,
        slice_id,
        category,
        ts_ns,
        end_ns,
        annotation_slice_id
    from innermost
)

select * from final
