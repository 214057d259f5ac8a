{#
    One row per slice (trace_id, slice_id) of a committed trace. Rows of a
    trace whose `traces` file is not in the lake yet (a load interrupted
    mid-commit) are left out: the semi-join on the traces source is why this
    staging view reads a second source.
#}

with

source as (
    select * from {{ source('lake', 'slices') }}
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
        slice_id,
        track_id,
        parent_id,
        correlation,
        external_id,
        device,
        stream,

        ---------- strings
        phase,
        category,
        name,
        collective_name,
        process_group_name,
        process_group_desc,
        dtype,
        args,

        ---------- numerics
        depth,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        process_group_ranks,

        ---------- booleans
        is_partial_overlap,

        ---------- times (ns, absolute clock)
        ts as ts_ns,
        dur as dur_ns,
        ts + dur as end_ns

    from committed
)

select * from renamed
