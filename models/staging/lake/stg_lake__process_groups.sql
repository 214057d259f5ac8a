{#
    One row per process group a rank reported (trace_id, source, pg_name) in
    a committed trace; rows of traces not committed yet are left out.
#}

with

{# Not named `source` like the other staging imports: the table has a
   column called `source`. #}
lake_process_groups as (
    select * from {{ lake_source('process_groups') }}
),

committed_traces as (
    select trace_id from {{ lake_source('traces') }}
),

committed as (
    select *
    from lake_process_groups
    where trace_id in (select committed_traces.trace_id from committed_traces)
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('process_groups') }}
    from committed
)

select * from renamed
