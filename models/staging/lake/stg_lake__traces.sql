{#
    One row per loaded trace file. The lake's `traces` file of a trace is
    renamed into place last, so this table is also the list of committed
    traces that the other staging views filter on. Column names already carry
    their units; nothing to rename.
#}

with

source as (
    select * from {{ lake_source('traces') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('traces') }}
    from source
)

select * from renamed
