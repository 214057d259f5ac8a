{#
    Every traffic-bearing record of every comm log (set-up records dropped),
    with the group it runs on and its place in that group's sequence:

    * group_key: the group's global ranks as text ('0,1'); for point-to-point
      records the directed pair ('0->4'), so the sender's and the receiver's
      records of one transfer share it;
    * group_seq: this rank's n-th call of this collective family on this
      group (1-based; for P2P the n-th transfer of the pair) -- the same n on
      every member is the same collective instance, because every member of
      a group issues the group's collectives in the same order;
    * group_kind: contract kind (tp, pp, dp, embedding, model, world, ...)
      from Megatron's group description when the log carries it
      (process_group_kinds seed, exact rows), else from the layout in
      config.json with Megatron's default order tp-cp-dp-pp: the dimensions
      along which the group's ranks vary; 'p2p' for point-to-point.
#}

with

events as (
    select
        run_id,
        trace_id,
        rank,
        seq,
        op,
        collective,
        is_p2p,
        is_send,
        group_ranks,
        group_size,
        peer_rank,
        root_rank,
        dtype,
        nelems,
        out_nelems,
        bytes,
        group_desc,
        call_site,
        is_emulated,
        in_step,
        log_format,
        coalesced_index,
        world_size,
        tp_size,
        pp_size,
        dp_size,
        cp_size
    from {{ ref('stg_lake__comm_log_events') }}
    where not is_setup
),

descriptions as (
    select
        pg_desc,
        group_kind
    from {{ ref('process_group_kinds') }}
    where pg_desc is not null
),

keyed as (
    select
        events.*,
        case
            when
                events.is_p2p
                then (case when events.is_send then events.rank else events.peer_rank end)
        end as src_rank,
        case
            when
                events.is_p2p
                then (case when events.is_send then events.peer_rank else events.rank end)
        end as dst_rank,
        case
            when events.is_p2p
                then
                    cast(
                        case
                            when events.is_send then events.rank else events.peer_rank
                        end as string
                    )
                    || '->'
                    || cast(
                        case
                            when events.is_send then events.peer_rank else events.rank
                        end as string
                    )
            else {{ array_to_text('events.group_ranks') }}
        end as group_key,
        case when events.is_p2p then 'p2p' else events.collective end as sequence_family
    from events
),

{# Coordinates of every member along tp, cp, dp, pp (default order), to name
   the dimensions a group varies along when no description is logged. #}
member_ranks as (
    select
        keyed.run_id,
        keyed.trace_id,
        keyed.seq,
        keyed.tp_size,
        keyed.cp_size,
        keyed.dp_size,
        keyed.pp_size,
        {{ explode_with_position('keyed.group_ranks', 'member_rank', 'member_position') }}
    from keyed
    where
        not keyed.is_p2p
        and keyed.group_desc is null
        and keyed.tp_size is not null
        and keyed.pp_size is not null
        and keyed.dp_size is not null
),

members as (
    select
        run_id,
        trace_id,
        seq,
        member_rank % tp_size as tp_coordinate,
        {{ integer_divide('member_rank', 'tp_size') }}
        % coalesce(cp_size, 1) as cp_coordinate,
        {{ integer_divide('member_rank', 'tp_size * coalesce(cp_size, 1)') }}
        % dp_size as dp_coordinate,
        {{ integer_divide('member_rank', 'tp_size * coalesce(cp_size, 1) * dp_size') }}
            as pp_coordinate,
        pp_size
    from member_ranks
),

varying as (
    select
        run_id,
        trace_id,
        seq,
        count(distinct tp_coordinate) > 1 as varies_tp,
        count(distinct cp_coordinate) > 1 as varies_cp,
        count(distinct dp_coordinate) > 1 as varies_dp,
        count(distinct pp_coordinate) as pp_stages,
        min(pp_size) as pp_size
    from members
    group by 1, 2, 3
),

kinds as (
    select
        keyed.*,
        coalesce(
            case when keyed.is_p2p then 'p2p' end,
            descriptions.group_kind,
            case when keyed.group_size = keyed.world_size then 'world' end,
            case
                when keyed.group_size = 1 then 'single'
                when
                    varying.pp_stages > 1 and varying.pp_stages < varying.pp_size
                    and not varying.varies_tp and not varying.varies_dp then 'embedding'
                when varying.pp_stages > 1 and varying.varies_tp and not varying.varies_dp
                    then 'model'
                when varying.pp_stages > 1 and not varying.varies_tp and not varying.varies_dp
                    then 'pp'
                when varying.pp_stages = 1 and varying.varies_dp then 'dp'
                when varying.pp_stages = 1 and varying.varies_cp then 'cp'
                when varying.pp_stages = 1 and varying.varies_tp then 'tp'
            end,
            'other'
        ) as group_kind
    from keyed
    left join descriptions
        on keyed.group_desc = descriptions.pg_desc
    left join varying
        on
            keyed.run_id = varying.run_id
            and keyed.trace_id = varying.trace_id
            and keyed.seq = varying.seq
),

final as (
    select
        run_id,
        trace_id,
        rank,
        seq,
        op,
        collective,
        is_p2p,
        is_send,
        group_kind,
        group_key,
        case
            when is_p2p then {{ make_array(['src_rank', 'dst_rank']) }} else group_ranks
        end as group_ranks,
        case when is_p2p then 2 else group_size end as group_size,
        row_number() over (
            partition by run_id, rank, group_key, sequence_family
            order by seq
        ) as group_seq,
        src_rank,
        dst_rank,
        peer_rank,
        root_rank,
        dtype,
        nelems,
        out_nelems,
        bytes,
        group_desc,
        call_site,
        is_emulated,
        in_step,
        log_format,
        coalesced_index,
        world_size
    from kinds
)

select * from final
