{#
    One row per collective instance of a run (run_id, collective_id): the
    same collective found on the member ranks of its group
    (int_collective_members_matched says how they were tied), GPU (NCCL
    kernels) and CPU (c10d/gloo calls) alike (`device`), times on the
    reference clock (dim_rank_clock_offsets).

    Skew: start_skew = last arrival - first arrival (how long the first
    rank waited), end_skew = last end - first end (small when the clocks
    are aligned). transfer_ns: the shortest duration across ranks, the
    last arriver's, which waited for nobody. Bandwidth as nccl-tests
    (doc/PERFORMANCE.md): algbw = bytes / transfer (bytes per ns = GB/s),
    busbw = algbw x the op's factor (seed collective_ops: all-reduce
    2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast,
    reduce, send/recv 1) with n the group's ranks.
    is_ambiguous: tied by order without the traces naming the group, and
    either the group itself was inferred or the members made different
    numbers of such calls in the iteration; or a P2P call that names no
    peer in a group of more than two ranks (left alone).
#}

with

members as (
    select * from {{ ref('int_collective_members_aligned') }}
),

bus_factors as (
    {{ collective_bus_factors() }}
),

instances as (
    select
        run_id,
        collective_id,
        min(device) as device,
        min(iteration) as iteration,
        min(process_group_key) as process_group_key,
        min(process_group_kind) as process_group_kind,
        min(process_group_index) as process_group_index,
        min(process_group_ranks_key) as process_group_ranks_key,
        min(match_basis) as match_basis,
        min(seq) as seq,
        min(op) as op,
        count(distinct op) as op_count,
        bool_or(is_p2p) as is_p2p,
        min(case when p2p_direction = 'send' then rank end) as sender_rank,
        min(case when p2p_direction = 'recv' then rank end) as receiver_rank,
        min(dtype) as dtype,
        max(bytes) as bytes,
        min(ranks_expected) as ranks_expected,
        cast(count(*) as bigint) as ranks_matched,
        min(scope_call_count) as min_scope_calls,
        max(scope_call_count) as max_scope_calls,
        min(arrival_ns) as first_start_ns,
        max(arrival_ns) as last_start_ns,
        min(end_ns) as first_end_ns,
        max(end_ns) as last_end_ns,
        min(dur_ns) as transfer_ns,
        cast(sum(wait_ns) as bigint) as total_wait_ns,
        max(case when is_last then rank end) as last_rank,
        max(case when is_last then wait_caused_ns end) as last_rank_wait_caused_ns
    from members
    group by 1, 2
),

final as (
    select
        instances.run_id,
        instances.collective_id,
        instances.device,
        instances.iteration,
        instances.process_group_key,
        instances.process_group_kind,
        instances.process_group_index,
        instances.process_group_ranks_key,
        instances.match_basis,
        instances.seq,
        instances.op,
        instances.is_p2p,
        instances.sender_rank,
        instances.receiver_rank,
        instances.dtype,
        instances.bytes,
        instances.ranks_expected,
        instances.ranks_matched,
        instances.ranks_matched = instances.ranks_expected as is_complete,
        (
            instances.match_basis = 'inferred'
            or (
                instances.match_basis = 'group_kind'
                and instances.min_scope_calls != instances.max_scope_calls
            )
            or instances.op_count > 1
            or (instances.is_p2p and instances.ranks_expected = 2 and instances.ranks_matched = 1)
        ) as is_ambiguous,
        instances.first_start_ns,
        instances.last_start_ns,
        instances.last_start_ns - instances.first_start_ns as start_skew_ns,
        instances.first_end_ns,
        instances.last_end_ns,
        instances.last_end_ns - instances.first_end_ns as end_skew_ns,
        instances.transfer_ns,
        instances.total_wait_ns,
        case
            when instances.transfer_ns > 0
                then cast(instances.bytes as double) / instances.transfer_ns
        end as algbw_gbps,
        case
            when instances.transfer_ns > 0
                then
                    cast(instances.bytes as double) / instances.transfer_ns
                    * {{ bus_bandwidth_factor(
                        'bus_factors.bus_factor', 'instances.ranks_expected'
                    ) }}
        end as busbw_gbps,
        instances.last_rank,
        instances.last_rank_wait_caused_ns
    from instances
    left join bus_factors
        on instances.op = bus_factors.op
)

select * from final
