{#
    One row per annotation range (trace_id, slice_id) of a committed trace:
    Kineto user annotations and Nsight NVTX push/pop ranges, with ingest's
    parent and lineage (ingest/annotation_context.py). Rows of traces not
    committed yet are left out.
#}

with

committed as (
    {{ committed_lake_rows('annotation_ranges') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('annotation_ranges') }}
    from committed
)

select * from renamed
