{#
    Rank x rank traffic of each run's comm logs per collective algorithm
    (int_comm_transfers_expanded): bytes every rank sends to every other
    rank in one step. All-reduce appears twice (ring and tree); pick one
    with `algorithm <> 'tree_all_reduce'` for a ring plan, or the other way.
#}

with

transfers as (
    select
        run_id,
        algorithm,
        src_rank,
        dst_rank,
        group_kind,
        bytes,
        in_step
    from {{ ref('int_comm_transfers_expanded') }}
),

final as (
    select
        run_id,
        algorithm,
        src_rank,
        dst_rank,
        count(*) as transfers,
        sum(bytes) as bytes,
        sum(case when in_step then bytes else 0 end) as step_bytes,
        min(group_kind) as group_kind,
        count(distinct group_kind) as group_kinds
    from transfers
    group by 1, 2, 3, 4
)

select * from final
