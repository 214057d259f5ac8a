{#
    One row per flow (an arrow slice_out -> slice_in inside one trace) of a
    committed trace; rows of traces not committed yet are left out.
#}

with

source as (
    select * from {{ source('lake', 'flows') }}
),

committed_traces as (
    select trace_id from {{ source('lake', 'traces') }}
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
        flow_id,
        slice_out,
        slice_in,

        ---------- strings
        category,

        ---------- times (ns, absolute clock)
        ts_out as ts_out_ns,
        ts_in as ts_in_ns

    from committed
)

select * from renamed
