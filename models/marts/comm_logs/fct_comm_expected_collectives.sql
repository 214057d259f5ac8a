{#
    One row per expected collective instance: run x group x family x n-th
    call on that group, lined up across the ranks that logged it (every
    member of a group issues the group's collectives in the same order, so
    the n-th call of each member is one instance). P2P transfers are
    instances of their directed pair (sender's and receiver's records).
    A comm log covers one training step, so iteration is 1.
#}

with

calls as (
    select
        run_id,
        rank,
        seq,
        op,
        collective,
        is_p2p,
        is_send,
        group_kind,
        group_key,
        group_ranks,
        group_size,
        group_seq,
        dtype,
        bytes,
        call_site,
        in_step
    from {{ ref('int_comm_calls_grouped') }}
),

instances as (
    select
        run_id,
        group_key,
        case when is_p2p then 'p2p' else collective end as collective,
        group_seq,
        min(group_kind) as group_kind,
        min(group_ranks) as group_ranks,
        min(group_size) as group_size,
        min(op) as op,
        min(dtype) as dtype,
        max(bytes) as bytes,
        min(bytes) as min_bytes,
        count(distinct rank) as ranks_logged,
        count(distinct case when is_p2p then 'p2p' else op end) as op_variants,
        min(seq) as first_seq,
        min(call_site) as call_site,
        bool_and(coalesce(in_step, true)) as in_step
    from calls
    group by 1, 2, 3, 4
),

final as (
    select
        run_id,
        1 as iteration,
        group_kind,
        group_key,
        group_ranks,
        group_size,
        collective,
        group_seq,
        op,
        dtype,
        bytes,
        case collective
            when 'all_reduce' then 2.0 * (group_size - 1) / group_size
            when 'all_gather' then 1.0 * (group_size - 1) / group_size
            when 'reduce_scatter' then 1.0 * (group_size - 1) / group_size
            when 'all_to_all' then 1.0 * (group_size - 1) / group_size
            else 1.0
        end * bytes as bus_bytes,
        ranks_logged,
        ranks_logged = group_size as is_complete,
        op_variants = 1 and min_bytes = bytes as is_consistent,
        first_seq,
        call_site,
        in_step
    from instances
)

select * from final
