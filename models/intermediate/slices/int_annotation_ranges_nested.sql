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
    ' > ' (ingest writes it with the lineage: joining every lineage back
    to its names here cost 0.3-0.6 s of a 256-rank x 2-iteration build).
    tid and thread_name: the thread the range was recorded on (the trace's
    `threads`), so that a reader can show each thread's tree apart.
    Per trace (materialized per_trace): keyed by trace_id.
#}

{%- set pending = traces_pending() %}

with

ranges as (
    select * from {{ annotation_range_slices(pending) }} as scanned  -- noqa: AM04
),

threads as (
    select * from {{ trace_threads(pending) }} as scanned  -- noqa: AM04
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
        threads.tid,
        threads.thread_name,
        ranges.name,
        {{ array_length('ranges.lineage_range_ids') }} - 1 as annotation_depth,
        ranges.annotation_path,
        ranges.ts_ns,
        ranges.dur_ns,
        ranges.end_ns,
        ranges.lineage_range_ids
    from ranges
    left join threads
        on
            ranges.trace_id = threads.trace_id
            and ranges.track_id = threads.track_id
)

select * from final
