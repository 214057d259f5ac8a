{#
    One row per flow (an arrow slice_out -> slice_in inside one trace) of a
    committed trace; rows of traces not committed yet are left out.
#}

with

committed as (
    {{ committed_lake_rows('flows') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('flows') }}
    from committed
)

select * from renamed
