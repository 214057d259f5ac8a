{#
    One row per process group a rank reported (trace_id, source, pg_name) in
    a committed trace; rows of traces not committed yet are left out.
#}

with

committed as (
    {{ committed_lake_rows('process_groups') }}
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('process_groups') }}
    from committed
)

select * from renamed
