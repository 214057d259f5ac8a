{#
    One row per track (CPU thread or GPU stream) (trace_id, track_id) of a
    committed trace; rows of traces not committed yet are left out.
#}

with

source as (
    select * from {{ source('lake', 'threads') }}
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
        track_id,
        pid,
        tid,

        ---------- strings
        thread_name,

        ---------- numerics
        thread_sort_index,
        slice_count,

        ---------- booleans
        is_gpu

    from committed
)

select * from renamed
