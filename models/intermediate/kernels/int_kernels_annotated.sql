{#
    One row per launched GPU kernel, copy or fill (trace_id, slice_id)
    whose launch call lies inside an annotation range (macro
    is_annotation_range: a Kineto user annotation or an Nsight NVTX
    push/pop range): `annotation_slice_id`, the innermost one, and
    `launch_distance`, the parent links from the launch call up to it (1:
    its direct parent). Work launched outside every range has no row.

    Ingest nests each thread's slices (ingest/nesting.py: a slice's parent
    is the deepest slice of its thread that wholly contains it, also for a
    slice that overlaps a neighbour only in part), so the ranges enclosing
    a launch are the annotation ancestors of its launch slice (the `ac2g`
    flow or correlation link of int_slices_contextualized). This walks that
    chain upwards from the launch and stops at the first annotation (macro
    nearest_annotations): ingest's nesting exactly (ties at equal times,
    partial overlaps), at a few steps per kernel, where a time join on the
    thread would compare each launch with every range of its thread.
    int_annotation_ranges_nested projects the ranges onto these kernels;
    int_kernels_classified gives each kernel its range.
    Per trace (macros/per_trace.sql): delete+insert on trace_id.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key='trace_id',
    post_hook="{{ delete_unloaded_traces() }}",
) }}

{%- set pending = traces_pending() %}

with

launched as (
    select
        trace_id,
        slice_id,
        category,
        launch_slice_id,
        ts_ns,
        end_ns
    from {{ ref('int_slices_contextualized') }}
    where
        is_gpu
        and launch_slice_id is not null
        and {{ trace_filter(pending) }}
),

cpu_slices as (
    select * from {{ annotated_cpu_slices(pending) }} as flagged  -- noqa: AM04
),

starts as (
    select
        launched.trace_id,
        launched.slice_id,
        launch.parent_id as from_id
    from launched
    inner join cpu_slices as launch
        on
            launched.trace_id = launch.trace_id
            and launched.launch_slice_id = launch.slice_id
),

final as (
    select
        launched.trace_id,
        launched.slice_id,
        launched.category,
        launched.ts_ns,
        launched.end_ns,
        nearest.annotation_slice_id,
        nearest.distance as launch_distance
    from {{ nearest_annotations('starts', 'cpu_slices') }} as nearest
    inner join launched
        on
            nearest.trace_id = launched.trace_id
            and nearest.slice_id = launched.slice_id
)

select * from final
