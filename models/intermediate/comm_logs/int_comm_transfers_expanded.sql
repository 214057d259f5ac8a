{#
    The rank-to-rank transfers each comm-log record implies, per algorithm,
    from the logging rank's own record (each rank contributes its outgoing
    edges, so the matrix is derived from every rank's log, not from rank 0's):

    * ring_all_reduce:     to the ring successor, 2(n-1)/n x bytes
    * tree_all_reduce:     one binary tree over the group's order: bytes to
                           the parent (reduce) and to each child (broadcast)
    * ring_all_gather:     to the successor, (n-1)/n x bytes (full output)
    * ring_reduce_scatter: to the successor, (n-1)/n x bytes (full input)
    * all_to_all:          bytes/n to every other member
    * ring_broadcast:      a chain from the root: bytes to the successor,
                           unless the successor is the root
    * p2p:                 bytes from sender to receiver (send records only)

    The ring follows the group's rank order as logged (NCCL builds rings in
    its own topology-aware order; this is the logical plan). Barriers,
    reduce, gather and scatter carry no modelled traffic.
#}

with

calls as (
    select
        run_id,
        rank,
        seq,
        collective,
        is_p2p,
        is_send,
        group_kind,
        group_key,
        group_seq,
        group_ranks,
        group_size,
        dst_rank,
        root_rank,
        bytes,
        in_step
    from {{ ref('int_comm_calls_grouped') }}
    where bytes > 0
),

positioned as (
    select
        calls.*,
        array_position(calls.group_ranks, calls.rank) as group_position
    from calls
    where not calls.is_p2p and calls.group_size > 1
),

{# Edge slots of one rank: 0 = ring successor, 1 = tree parent, 2 and 3 = tree children. #}
slots as (
    select 0 as edge_slot
    union all
    select 1 as edge_slot
    union all
    select 2 as edge_slot
    union all
    select 3 as edge_slot
),

ring_edges as (
    select
        positioned.*,
        case positioned.collective
            when 'all_reduce' then 'ring_all_reduce'
            when 'all_gather' then 'ring_all_gather'
            when 'reduce_scatter' then 'ring_reduce_scatter'
            when 'broadcast' then 'ring_broadcast'
        end as algorithm,
        {{ array_element(
            'positioned.group_ranks',
            '(positioned.group_position % positioned.group_size) + 1',
        ) }} as peer,
        case positioned.collective
            when
                'all_reduce'
                then 2.0 * (positioned.group_size - 1) / positioned.group_size * positioned.bytes
            when 'broadcast' then 1.0 * positioned.bytes
            else 1.0 * (positioned.group_size - 1) / positioned.group_size * positioned.bytes
        end as edge_bytes
    from positioned
    where positioned.collective in ('all_reduce', 'all_gather', 'reduce_scatter', 'broadcast')
),

tree_edges as (
    select
        positioned.*,
        'tree_all_reduce' as algorithm,
        case slots.edge_slot
            when 1 then {{ array_element(
                'positioned.group_ranks',
                integer_divide('positioned.group_position - 2', '2') ~ ' + 1',
            ) }}
            when 2 then {{ array_element(
                'positioned.group_ranks', '2 * positioned.group_position',
            ) }}
            when 3 then {{ array_element(
                'positioned.group_ranks', '2 * positioned.group_position + 1',
            ) }}
        end as peer,
        1.0 * positioned.bytes as edge_bytes
    from positioned
    cross join slots
    where
        positioned.collective = 'all_reduce'
        and (
            (slots.edge_slot = 1 and positioned.group_position > 1)
            or (slots.edge_slot = 2 and 2 * positioned.group_position <= positioned.group_size)
            or (slots.edge_slot = 3 and 2 * positioned.group_position + 1 <= positioned.group_size)
        )
),

{# Positions 1..largest group, to pair each all-to-all member with every other. #}
member_positions as (
    select {{ explode_with_position(
        integer_range(1, 'largest_group + 1'), 'member_position', 'position_index'
    ) }}
    from (select max(group_size) as largest_group from positioned) as sizes
),

all_to_all_edges as (
    select
        positioned.*,
        'all_to_all' as algorithm,
        {{ array_element('positioned.group_ranks', 'member_positions.member_position') }}
            as peer,
        1.0 * positioned.bytes / positioned.group_size as edge_bytes
    from positioned
    cross join member_positions
    where
        positioned.collective = 'all_to_all'
        and member_positions.member_position <= positioned.group_size
        and {{ array_element('positioned.group_ranks', 'member_positions.member_position') }}
        <> positioned.rank
),

{# The three CTEs above share one column list (positioned.*, algorithm, peer, edge_bytes). #}
collective_edges as (
    select * from ring_edges
    where not coalesce(collective = 'broadcast' and peer = root_rank, false)
    union all
    select * from tree_edges
    union all
    select * from all_to_all_edges
),

final as (
    select
        run_id,
        rank as src_rank,
        peer as dst_rank,
        seq,
        collective,
        group_kind,
        group_key,
        group_seq,
        group_size,
        in_step,
        algorithm,
        edge_bytes as bytes
    from collective_edges
    union all
    select
        run_id,
        rank as src_rank,
        dst_rank,
        seq,
        collective,
        group_kind,
        group_key,
        group_seq,
        group_size,
        in_step,
        'p2p' as algorithm,
        1.0 * bytes as bytes
    from calls
    where is_p2p and is_send
)

select * from final
