{#
    One row per rank's part in a collective instance (run_id, collective_id,
    rank), times on the reference clock (dim_rank_clock_offsets). The rules
    live in int_collective_members_aligned.
#}

with

members as (
    select * from {{ ref('int_collective_members_aligned') }}
),

final as (
    select
        run_id,
        collective_id,
        rank,
        trace_id,
        slice_id,
        device,
        iteration,
        op,
        process_group_key,
        process_group_kind,
        process_group_index,
        seq,
        is_p2p,
        p2p_direction,
        peer_rank,
        host_name,
        offset_ns,
        arrival_ns,
        end_ns,
        dur_ns,
        arrival_order,
        is_last,
        wait_ns,
        wait_caused_ns
    from members
)

select * from final
