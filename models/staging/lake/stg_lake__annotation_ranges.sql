{#
    One row per annotation range (trace_id, slice_id) of a committed trace:
    Kineto user annotations and Nsight NVTX push/pop ranges, with ingest's
    parent and lineage (ingest/annotation_context.py). Rows of traces not
    committed yet are left out.
#}

with

source as (
    select * from {{ lake_source('annotation_ranges') }}
),

committed_traces as (
    select trace_id from {{ lake_source('traces') }}
),

committed as (
    select *
    from source
    where trace_id in (select committed_traces.trace_id from committed_traces)
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('annotation_ranges') }}
    from committed
)

select * from renamed
