{#
    One row per record of a comm log (comm_log_rank_<r>.json, Genstack's or
    tracehouse commtrace's): key (run_id, trace_id, seq), trace_id being the
    log file's id. Comm logs are not traces: each file lands by one rename.
#}

with

lake_comm_log_events as (
    select * from {{ lake_source('comm_log_events') }}
),

renamed as (
    select
        ---------- ids
        run_id,
        trace_id,
        rank,
        seq,
        call_id,

        ---------- strings
        op,
        collective,
        dtype,
        reduce_op,
        group_desc,
        call_site,
        log_format,
        model_size,
        record,
        path,
        content_hash,

        ---------- lists
        group_ranks,
        shape,

        ---------- numerics
        group_size,
        peer_rank,
        root_rank,
        nelems,
        out_nelems,
        bytes,
        batch_idx,
        batch_size,
        coalesced,
        coalesced_index,
        world_size,
        tp_size,
        pp_size,
        dp_size,
        cp_size,
        size_bytes,

        ---------- booleans
        is_setup,
        is_p2p,
        is_send,
        is_emulated,
        in_step,

        ---------- times (ns)
        mtime_ns,

        ---------- timestamps
        ingested_at

    from lake_comm_log_events
)

select * from renamed
