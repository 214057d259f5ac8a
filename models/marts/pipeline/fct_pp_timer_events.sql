{#
    One row per forward or backward pass of one microbatch on one rank in
    one iteration, as the PP timer measured it (event_times_PP*.json).
    When a run holds two files for the same rank and iteration (the same
    log copied twice, or an original-format file without iteration beside
    ours), the most recently ingested file wins, so the grain holds.
#}

with

pp_timer_events as (
    select
        run_id,
        trace_id,
        rank,
        pp_rank,
        pp_size,
        vpp_size,
        tp_cp_dp_rank,
        iteration,
        vpp_chunk,
        microbatch,
        phase,
        start_ns,
        end_ns,
        dur_ns,
        total_execution_ns,
        clock,
        timer_format,
        path,
        ingested_at
    from {{ ref('stg_lake__pp_timer_events') }}
),

{# The latest file per (run, rank, pp_rank, tp_cp_dp_rank, iteration). #}
latest_files as (
    select
        run_id,
        trace_id
    from (
        select
            run_id,
            trace_id,
            row_number() over (
                partition by run_id, rank, pp_rank, tp_cp_dp_rank, iteration
                order by ingested_at desc, path desc
            ) as recency
        from pp_timer_events
    ) as files
    where recency = 1
),

final as (
    select
        pp_timer_events.run_id,
        pp_timer_events.rank,
        pp_timer_events.pp_rank,
        pp_timer_events.pp_size,
        pp_timer_events.vpp_size,
        pp_timer_events.tp_cp_dp_rank,
        pp_timer_events.iteration,
        pp_timer_events.vpp_chunk,
        pp_timer_events.microbatch,
        pp_timer_events.phase,
        pp_timer_events.start_ns,
        pp_timer_events.end_ns,
        pp_timer_events.dur_ns,
        pp_timer_events.total_execution_ns,
        pp_timer_events.clock,
        pp_timer_events.timer_format,
        pp_timer_events.trace_id,
        pp_timer_events.path
    from pp_timer_events
    inner join latest_files
        on
            pp_timer_events.run_id = latest_files.run_id
            and pp_timer_events.trace_id = latest_files.trace_id
)

select * from final
