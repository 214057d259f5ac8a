{#
    One row per rank's part in a collective instance (run_id, collective_id,
    rank), on the reference clock: int_collective_members_matched with the
    rank's int_rank_clock_offsets_estimated offset added to its times, and what the
    instance did to it.

      * arrival_ns: the rank's call starts (a GPU kernel's start, a c10d
        call's start); end_ns: it ends;
      * wait_ns = last arrival - own arrival: the time the rank sat in the
        collective waiting for the others (a victim's time);
      * wait_caused_ns: the waiting its lateness cost the others,
        attributed by arrival order: between the (k-1)-th and the k-th
        arrival, the k-1 ranks already there wait for the n-k+1 still
        absent, and that waiting (k-1 x gap) is shared equally by the
        absent ranks. The first to arrive causes nothing; the last carries
        the whole last gap; over the members it sums to the instance's
        total wait. Time spent inside the collective never counts against
        a rank, only arriving after others did.
    A per-run table rebuilt each time.
#}

with

members as (
    select * from {{ ref('int_collective_members_matched') }}
),

offsets as (
    select
        run_id,
        rank,
        offset_ns
    from {{ ref('int_rank_clock_offsets_estimated') }}
),

aligned as (
    select
        members.*,
        coalesce(offsets.offset_ns, 0) as offset_ns,
        members.ts_ns + coalesce(offsets.offset_ns, 0) as arrival_ns,
        members.end_ns + coalesce(offsets.offset_ns, 0) as aligned_end_ns
    from members
    left join offsets
        on
            members.run_id = offsets.run_id
            and members.rank = offsets.rank
),

ordered as (
    select
        aligned.*,
        count(*) over (partition by aligned.run_id, aligned.collective_id) as ranks_matched,
        max(aligned.arrival_ns)
            over (partition by aligned.run_id, aligned.collective_id)
            as last_arrival_ns,
        cast(row_number() over (
            partition by aligned.run_id, aligned.collective_id
            order by aligned.arrival_ns, aligned.rank
        ) as bigint) as arrival_order,
        aligned.arrival_ns - lag(aligned.arrival_ns) over (
            partition by aligned.run_id, aligned.collective_id
            order by aligned.arrival_ns, aligned.rank
        ) as gap_ns
    from aligned
),

shares as (
    select
        ordered.*,
        coalesce(
            cast(ordered.arrival_order - 1 as double)
            * ordered.gap_ns
            / (ordered.ranks_matched - ordered.arrival_order + 1),
            0
        ) as gap_share_ns
    from ordered
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
        is_p2p,
        p2p_direction,
        peer_rank,
        collective_name,
        dtype,
        bytes,
        match_basis,
        process_group_key,
        process_group_kind,
        process_group_index,
        process_group_ranks_key,
        seq_scope,
        seq,
        scope_call_count,
        ranks_expected,
        ranks_matched,
        host_name,
        offset_ns,
        arrival_ns,
        aligned_end_ns as end_ns,
        dur_ns,
        arrival_order,
        arrival_order = ranks_matched as is_last,
        last_arrival_ns - arrival_ns as wait_ns,
        cast(round(sum(gap_share_ns) over (
            partition by run_id, collective_id
            order by arrival_order
            rows between unbounded preceding and current row
        )) as bigint) as wait_caused_ns
    from shares
)

select * from final
