{#
    One row per forward or backward pass of a PP-timer log
    (event_times_PP*.json): key (run_id, trace_id, vpp_chunk, microbatch,
    phase), trace_id being the timer file's id. PP-timer files are not
    traces, so there is no commit marker to filter on: each file lands by
    one rename. Times are ns after the rank's post-barrier timer start.
#}

with

lake_pp_timer_events as (
    select * from {{ lake_source('pp_timer_events') }}
),

renamed as (
    select
        ---------- ids
        run_id,
        trace_id,
        rank,
        iteration,
        vpp_chunk,
        microbatch,

        ---------- strings
        phase,
        clock,
        timer_format,
        path,
        content_hash,

        ---------- numerics
        pp_rank,
        pp_size,
        vpp_size,
        tp_cp_dp_rank,
        size_bytes,

        ---------- times (ns)
        start_ns,
        end_ns,
        dur_ns,
        total_execution_ns,
        mtime_ns,

        ---------- timestamps
        ingested_at

    from lake_pp_timer_events
)

select * from renamed
