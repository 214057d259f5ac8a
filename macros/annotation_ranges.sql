{#
    annotation_range_slices(pending): the annotation ranges of the traces
    `pending` (traces_pending()) as a subquery: every slice that ingest
    marked as a range (lake column annotation_kind,
    ingest/annotation_context.py): Kineto user annotations (category
    `user_annotation`: torch.profiler.record_function, Megatron's and
    torch's own ranges, `ProfilerStep#N`) and Nsight NVTX push/pop ranges.
    Not `gpu_user_annotation`: Kineto's copies of user annotations on GPU
    tracks span the GPU work of a CPU range, a projection of it
    (fct_annotation_ranges computes its own from the kernels), not a range
    of their own. The one read of ranges from the lake; its parent and
    lineage are ingest's (lake columns annotation_slice_id and
    annotation_lineage).
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
        from {{ lake_scan('slices', pending) }}
        where
            annotation_kind is not null
            and {{ trace_filter(pending) }}
    )
{%- endmacro %}
