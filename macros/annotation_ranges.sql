{#
    annotation_range_slices(pending): the annotation ranges of the traces
    `pending` (traces_pending()) as a subquery: the lake's
    `annotation_ranges` table (ingest/annotation_context.py writes the
    slices marked as ranges there, a few rows per trace): Kineto user
    annotations (torch.profiler.record_function, Megatron's and torch's own
    ranges, `ProfilerStep#N`) and Nsight NVTX push/pop ranges, with ingest's
    parent (parent_range_id) and lineage (lineage_range_ids). Not
    `gpu_user_annotation`: Kineto's copies of user annotations on GPU
    tracks span the GPU work of a CPU range, a projection of it
    (fct_annotation_ranges computes its own from the kernels), not a range
    of their own. The one read of ranges from the lake.
#}
{% macro annotation_range_slices(pending) -%}
    (
        select
            run_id,
            rank,
            trace_id,
            slice_id,
            track_id,
            annotation_kind,
            annotation_slice_id as parent_range_id,
            name,
            ts_ns,
            dur_ns,
            end_ns,
            annotation_lineage as lineage_range_ids
        from {{ lake_scan('annotation_ranges', pending) }}
        where {{ trace_filter(pending) }}
    )
{%- endmacro %}
