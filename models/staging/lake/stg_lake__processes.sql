{#
    One row per process (trace_id, pid) of a committed trace; rows of traces
    not committed yet are left out.
#}

with

source as (
    select * from {{ lake_source('processes') }}
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
    select
        ---------- ids
        run_id,
        rank,
        trace_id,
        pid,

        ---------- strings
        process_name,
        process_labels,

        ---------- numerics
        process_sort_index

    from committed
)

select * from renamed
