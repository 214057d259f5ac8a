{#
    One row per rank of a run: its coordinate along every parallel
    dimension, read off dim_process_groups (a rank's coordinate along a
    dimension is its position in its group of that kind, as in Megatron's
    get_*_rank), its pipeline stage and model replica, and the host its
    traces were recorded on. Ranks come from the groups and from the traces.
#}

with

process_groups as (
    select
        run_id,
        group_kind as kind,
        group_index,
        ranks
    from {{ ref('int_process_groups_resolved') }}
),

traces as (
    select
        run_id,
        rank,
        host_name,
        trace_start_ns
    from {{ ref('int_traces_loaded') }}
),

{# Each member of a group with its 0-based position in the group. #}
members as (
    select
        run_id,
        kind,
        group_index,
        cast({{ array_length('ranks') }} as bigint) as group_size,
        {{ explode_with_position('ranks', 'rank', 'position_in_group') }}
    from process_groups
),

traced_ranks as (
    select distinct
        run_id,
        rank
    from traces
),

all_ranks as (
    select distinct
        run_id,
        rank
    from members
    union
    select
        run_id,
        rank
    from traced_ranks
),

{# The host of a rank: from its latest trace (a rank does not move). #}
hosts as (
    select
        run_id,
        rank,
        host_name
    from (
        select
            run_id,
            rank,
            host_name,
            row_number() over (
                partition by run_id, rank order by trace_start_ns desc
            ) as recency
        from traces
        where host_name is not null
    ) as named_traces
    where recency = 1
),

coordinates as (
    select
        run_id,
        rank,
        max(case when kind = 'tp' then position_in_group end) as tp_rank,
        max(case when kind = 'cp' then position_in_group end) as cp_rank,
        max(case when kind = 'dp' then position_in_group end) as dp_rank,
        max(case when kind = 'pp' then position_in_group end) as pp_rank,
        max(case when kind = 'ep' then position_in_group end) as ep_rank,
        max(case when kind = 'etp' then position_in_group end) as etp_rank,
        max(case when kind = 'edp' then position_in_group end) as edp_rank,
        max(case when kind = 'pp' then group_size end) as pp_size,
        max(case when kind = 'tp' then group_index end) as tp_group_index,
        max(case when kind = 'cp' then group_index end) as cp_group_index,
        max(case when kind = 'dp' then group_index end) as dp_group_index,
        max(case when kind = 'pp' then group_index end) as pp_group_index,
        max(case when kind = 'ep' then group_index end) as ep_group_index,
        max(case when kind = 'model_replica' then group_index end) as model_replica_index,
        bool_or(kind = 'embedding') as is_in_embedding_group
    from members
    group by 1, 2
),

final as (
    select
        all_ranks.run_id,
        all_ranks.rank,
        coordinates.tp_rank,
        coordinates.cp_rank,
        coordinates.dp_rank,
        coordinates.pp_rank,
        coordinates.ep_rank,
        coordinates.etp_rank,
        coordinates.edp_rank,
        coordinates.pp_rank as pp_stage,
        coordinates.pp_size,
        coordinates.pp_rank = 0 as is_first_stage,
        coordinates.pp_rank = coordinates.pp_size - 1 as is_last_stage,
        {# All ranks sharing a data-parallel coordinate hold one model
           replica (tp x cp x pp), so the replica is the dp coordinate when
           no source lists the replicas. #}
        coalesce(coordinates.model_replica_index, coordinates.dp_rank) as model_replica,
        coordinates.tp_group_index,
        coordinates.cp_group_index,
        coordinates.dp_group_index,
        coordinates.pp_group_index,
        coordinates.ep_group_index,
        coalesce(coordinates.is_in_embedding_group, false) as is_in_embedding_group,
        hosts.host_name,
        traced_ranks.rank is not null as has_trace
    from all_ranks
    left join coordinates
        on
            all_ranks.run_id = coordinates.run_id
            and all_ranks.rank = coordinates.rank
    left join hosts
        on
            all_ranks.run_id = hosts.run_id
            and all_ranks.rank = hosts.rank
    left join traced_ranks
        on
            all_ranks.run_id = traced_ranks.run_id
            and all_ranks.rank = traced_ranks.rank
)

select * from final
