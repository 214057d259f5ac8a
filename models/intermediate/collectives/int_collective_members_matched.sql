{#
    One row per rank's part in a collective instance (run_id, collective_id,
    rank): the calls of int_collective_calls_sequenced tied across ranks,
    on the traces' own clocks (int_collective_members_aligned applies the
    clock offsets). A per-run table rebuilt each time.

    The group of a call, by match_basis:
      * process_group: the trace names it (pg name, description, ranks);
        int_process_groups_matched resolves it to the run's group, else its
        ranks key stands for it;
      * group_kind: no process-group args, but the call site or step frame
        gives a kind (tp, dp_cp, pp, ...); a rank is in one group per kind
        (int_process_groups_resolved), so the kind names the group;
      * inferred: nothing names the group (e.g. the DLRM traces): the ranks
        of the run making calls of that op form it;
      * p2p_peer: a send/recv that names its peer (c10d's dst/src group
        rank): the pair sender -> receiver is the group.
    An instance is (group, iteration, seq scope, seq): the n-th call of the
    group in the iteration on every member (per op when the traces name no
    group, since then only kind, op and order tie calls together; per
    direction and peer for P2P). A P2P call in a group of more than two
    ranks that names no peer is paired with the other rank of its pipeline
    group when that group has two ranks (pp = 2: the previous and next
    stage are the same rank; Megatron's interleaved schedule sends half its
    P2P through WORLD then, `even_recv_odd_send_group`); else it cannot be
    paired and stays alone. A pair whose calls name no direction is keyed
    the same from both sides (lower rank, higher rank).
    ranks_expected: the group's size (2 for P2P; for an inferred group the
    ranks making such calls).
#}

with

calls as (
    select * from {{ ref('int_collective_calls_sequenced') }}
),

comm_groups as (
    select
        run_id,
        rank,
        process_group_desc,
        process_group_name,
        process_group_ranks_key,
        matched_group_kind,
        matched_group_index
    from {{ ref('int_process_groups_matched') }}
),

process_groups as (
    select
        run_id,
        group_kind,
        group_index,
        ranks,
        ranks_key,
        group_size
    from {{ ref('int_process_groups_resolved') }}
),

ranks as (
    select
        run_id,
        rank,
        host_name
    from {{ ref('int_ranks_placed') }}
),

{# Calls whose trace names the group. #}
named as (
    select
        calls.*,
        comm_groups.matched_group_kind as group_kind,
        comm_groups.matched_group_index as group_index
    from calls
    left join comm_groups
        on
            calls.run_id = comm_groups.run_id
            and calls.rank = comm_groups.rank
            and calls.process_group_desc is not distinct from comm_groups.process_group_desc
            and calls.process_group_name is not distinct from comm_groups.process_group_name
            and calls.process_group_ranks_key
            is not distinct from comm_groups.process_group_ranks_key
    where calls.has_group_args
),

{# Calls with only a kind: the rank's one group of that kind. #}
kind_groups as (
    select
        calls.run_id,
        calls.trace_id,
        calls.slice_id,
        min(process_groups.group_index) as group_index,
        count(*) as group_count
    from calls
    inner join process_groups
        on
            calls.run_id = process_groups.run_id
            and calls.group_kind_hint = process_groups.group_kind
    where
        not calls.has_group_args
        and {{ array_has('process_groups.ranks', 'calls.rank') }}
    group by 1, 2, 3
),

kinded as (
    select
        calls.*,
        case when kind_groups.group_count = 1 then calls.group_kind_hint end as group_kind,
        case when kind_groups.group_count = 1 then kind_groups.group_index end as group_index
    from calls
    left join kind_groups
        on
            calls.trace_id = kind_groups.trace_id
            and calls.slice_id = kind_groups.slice_id
    where not calls.has_group_args
),

grouped as (
    select * from named
    union all
    select * from kinded
),

with_groups as (
    select
        grouped.*,
        process_groups.ranks as group_ranks,
        coalesce(process_groups.ranks_key, grouped.process_group_ranks_key) as group_ranks_key,
        coalesce(
            process_groups.group_size,
            -- ranks in the key: one more than its commas
            length(grouped.process_group_ranks_key)
            - length(replace(grouped.process_group_ranks_key, ',', '')) + 1
        ) as group_size,
        case
            when grouped.group_kind is not null
                then grouped.group_kind || ':' || cast(grouped.group_index as string)
            when grouped.process_group_ranks_key is not null
                then 'ranks:' || grouped.process_group_ranks_key
            when grouped.has_group_args
                then 'pg:' || coalesce(grouped.process_group_name, grouped.process_group_desc)
            else 'inferred:' || coalesce(grouped.group_kind_hint, 'unknown')
        end as group_key
    from grouped
    left join process_groups
        on
            grouped.run_id = process_groups.run_id
            and grouped.group_kind = process_groups.group_kind
            and grouped.group_index = process_groups.group_index
),

{# Two-rank pipeline groups: where a P2P call's peer is the group's other rank. #}
pipeline_pairs as (
    select
        run_id,
        ranks
    from process_groups
    where group_kind = 'pp' and group_size = 2
),

{# P2P: the peer's global rank (the group rank the call names), when it is
   another member; without one, in a larger group, the other stage of a
   two-stage pipeline. #}
peered as (
    select
        with_groups.*,
        case
            when
                with_groups.peer_index is null
                and pipeline_pairs.ranks is not null
                then
                    case
                        when {{ array_element('pipeline_pairs.ranks', '1') }} != with_groups.rank
                            then {{ array_element('pipeline_pairs.ranks', '1') }}
                        else {{ array_element('pipeline_pairs.ranks', '2') }}
                    end
            when with_groups.peer_index is null then null
            when
                with_groups.peer_index >= 0
                and with_groups.peer_index < {{ array_length('with_groups.group_ranks') }}
                and {{ array_element('with_groups.group_ranks', 'with_groups.peer_index + 1') }}
                != with_groups.rank
                then {{ array_element('with_groups.group_ranks', 'with_groups.peer_index + 1') }}
            when
                {{ array_has('with_groups.group_ranks', 'with_groups.peer_index') }}
                and with_groups.peer_index != with_groups.rank
                then with_groups.peer_index
        end as peer_rank
    from with_groups
    left join pipeline_pairs
        on
            with_groups.run_id = pipeline_pairs.run_id
            and with_groups.is_p2p
            and with_groups.peer_index is null
            and coalesce(with_groups.group_size, 0) > 2
            and {{ array_has('pipeline_pairs.ranks', 'with_groups.rank') }}
),

keyed as (
    select
        peered.*,
        case
            when peered.peer_rank is not null then 'p2p_peer'
            when peered.has_group_args then 'process_group'
            when peered.group_kind is not null then 'group_kind'
            else 'inferred'
        end as match_basis,
        case
            when peered.peer_rank is not null and peered.p2p_direction is null
                then
                    peered.group_key || ':'
                    || cast(least(peered.rank, peered.peer_rank) as string)
                    || '<>'
                    || cast(greatest(peered.rank, peered.peer_rank) as string)
            when peered.peer_rank is not null
                then
                    peered.group_key || ':'
                    || cast(
                        case
                            when peered.p2p_direction = 'send' then peered.rank else
                                peered.peer_rank
                        end as string
                    )
                    || '>'
                    || cast(
                        case
                            when peered.p2p_direction = 'send' then peered.peer_rank else
                                peered.rank
                        end as string
                    )
            {# A P2P op in a group of more than two ranks that names no peer cannot be paired. #}
            when peered.is_p2p and coalesce(peered.group_size, 0) != 2
                then peered.group_key || ':unpaired:' || cast(peered.rank as string)
            else peered.group_key
        end as instance_group_key
    from peered
),

{# An inferred group: the ranks of the run making calls of that kind and op. #}
inferred_sizes as (
    select
        run_id,
        group_key,
        seq_scope,
        count(distinct rank) as inferred_size
    from keyed
    where match_basis = 'inferred'
    group by 1, 2, 3
),

final as (
    select
        keyed.run_id,
        keyed.instance_group_key
        || '/' || coalesce(cast(keyed.iteration as string), '-')
        || '/' || keyed.seq_scope
        || '/' || cast(keyed.seq as string) as collective_id,
        keyed.rank,
        keyed.trace_id,
        keyed.slice_id,
        keyed.device,
        keyed.iteration,
        keyed.op,
        keyed.is_p2p,
        keyed.p2p_direction,
        keyed.peer_rank,
        keyed.collective_name,
        keyed.dtype,
        keyed.bytes,
        keyed.match_basis,
        keyed.group_key as process_group_key,
        keyed.instance_group_key,
        keyed.group_kind as process_group_kind,
        keyed.group_index as process_group_index,
        keyed.group_ranks_key as process_group_ranks_key,
        keyed.seq_scope,
        keyed.seq,
        {# Calls the rank made in this scope and iteration (members that
           disagree make matching by order doubtful). #}
        count(*) over (
            partition by
                keyed.run_id, keyed.instance_group_key, keyed.iteration, keyed.seq_scope, keyed.rank
        ) as scope_call_count,
        case
            when keyed.match_basis = 'p2p_peer' or keyed.is_p2p then 2
            when keyed.match_basis = 'inferred' then inferred_sizes.inferred_size
            else keyed.group_size
        end as ranks_expected,
        ranks.host_name,
        keyed.ts_ns,
        keyed.end_ns,
        keyed.dur_ns
    from keyed
    left join inferred_sizes
        on
            keyed.run_id = inferred_sizes.run_id
            and keyed.group_key = inferred_sizes.group_key
            and keyed.seq_scope = inferred_sizes.seq_scope
            and keyed.match_basis = 'inferred'
    left join ranks
        on
            keyed.run_id = ranks.run_id
            and keyed.rank = ranks.rank
)

select * from final
