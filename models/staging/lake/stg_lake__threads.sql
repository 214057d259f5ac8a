{#
    One row per track (CPU thread or GPU stream) (trace_id, track_id) of a
    committed trace; rows of traces not committed yet are left out.
#}

with

committed as (
    {{ committed_lake_rows('threads') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('threads') }}
    from committed
)

select * from renamed
