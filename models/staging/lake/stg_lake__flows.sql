{#
    One row per flow (an arrow slice_out -> slice_in inside one trace) of a
    committed trace; rows of traces not committed yet are left out.
#}

with

source as (
    select * from {{ lake_source('flows') }}
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
        {{ lake_columns('flows') }}
    from committed
)

select * from renamed
