{#
    One row per slice (trace_id, slice_id) of a committed trace. Rows of a
    trace whose `traces` file is not in the lake yet (a load interrupted
    mid-commit) are left out: the semi-join on the traces source (macro
    committed_lake_rows) is why this staging view reads a second source.
#}

with

committed as (
    {{ committed_lake_rows('slices') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('slices') }}
    from committed
)

select * from renamed
