{#
    Genstack's permutation view, from every rank's log: a permutation is a
    set of simultaneous directed rank->rank transfers in which each rank
    sends to at most one peer (one circuit configuration). Simultaneous
    means: the same ring step of every group of one kind for the same n-th
    collective (all TP groups run their n-th all-reduce together), or the
    n-th send of every rank in one pipeline direction. Rings use the group's
    logged order (int_comm_transfers_expanded, ring algorithms and p2p).
    One row per distinct permutation: how often it occurs and its bytes.
#}

with

transfers as (
    select
        run_id,
        src_rank,
        dst_rank,
        seq,
        collective,
        group_kind,
        group_seq,
        algorithm,
        bytes
    from {{ ref('int_comm_transfers_expanded') }}
    where algorithm <> 'tree_all_reduce' and algorithm <> 'all_to_all'
),

p2p_numbered as (
    select
        run_id,
        src_rank,
        dst_rank,
        algorithm,
        group_kind,
        bytes,
        case when dst_rank > src_rank then 'forward' else 'backward' end as direction,
        row_number() over (
            partition by
                run_id, src_rank,
                case when dst_rank > src_rank then 'forward' else 'backward' end
            order by seq
        ) as step_index
    from transfers
    where algorithm = 'p2p'
),

steps as (
    select
        run_id,
        src_rank,
        dst_rank,
        group_kind,
        bytes,
        algorithm || ':' || group_kind || ':' || cast(group_seq as string) as step_key
    from transfers
    where algorithm <> 'p2p'
    union all
    select
        run_id,
        src_rank,
        dst_rank,
        group_kind,
        bytes,
        'p2p:' || direction || ':' || cast(step_index as string) as step_key
    from p2p_numbered
),

step_pairs as (
    select
        run_id,
        step_key,
        min(group_kind) as group_kind,
        {{ string_agg_ordered(
            "cast(src_rank as string) || '->' || cast(dst_rank as string)",
            "','",
            'src_rank, dst_rank',
        ) }} as pairs,
        count(*) as pair_count,
        count(distinct src_rank) as senders,
        sum(bytes) as bytes
    from steps
    group by 1, 2
),

final as (
    select
        run_id,
        md5(pairs) as permutation_id,
        min(split_part(step_key, ':', 1)) as algorithm,
        min(group_kind) as group_kind,
        pairs,
        min(pair_count) as pair_count,
        bool_and(senders = pair_count) as is_partial_permutation,
        count(*) as occurrences,
        sum(bytes) as bytes
    from step_pairs
    group by 1, 5
)

select * from final
