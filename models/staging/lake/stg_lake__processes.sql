{#
    One row per process (trace_id, pid) of a committed trace; rows of traces
    not committed yet are left out.
#}

with

committed as (
    {{ committed_lake_rows('processes') }}
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
