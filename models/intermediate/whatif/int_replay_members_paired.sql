{#
    One row per collective instance x member kernel of the replay graph
    (run_id, collective_id, trace_id, slice_id): int_collective_members_aligned,
    except that the P2P calls it left alone are paired by the pipeline
    schedule. Why: a batched P2P call (Megatron's `batch_isend_irecv`, one
    ncclDevKernel_SendRecv) names no peer, and with more than two stages
    its group (the pipeline group) does not say which neighbour it talks
    to (the interleaved schedule's one-op kernels neither), so
    int_collective_members_matched leaves it a one-member instance
    and the replay keeps its wait for the other stage as its own
    transfer: the critical path of a PP4 run then stayed on stage 0 until
    the gradient sync.

    The CPU frame that launched the kernel says which Megatron helper it
    is (seed megatron_p2p_calls: send_forward_recv_backward sends to the
    next stage and receives from it, and so on), the rank's pipeline stage
    and group (int_ranks_placed) say who the neighbour is (next: stage + 1,
    prev: stage - 1, modulo the pipeline size); the kernel's message sizes
    say which of the helper's transfers it carries (a kernel that sent
    nothing, `In msg nelems` 0, is no send: the interleaved schedule
    issues one kernel per isend / irecv). Each transfer is a part:
    sender -> receiver on a flow (`forward`: activations, to the next
    stage; `backward`: gradients, to the previous one). Megatron issues a
    channel's transfers in the same order on both sides, so the k-th send
    on a channel in an iteration pairs with the k-th receive (the
    schedule's order). A kernel with two parts (a send and a receive) is a
    member of two instances and ends after both. A peerless P2P call whose
    frame or stage is unknown stays as int_collective_members_matched left
    it. A table rebuilt each time (it crosses ranks).

    Matching by order is only trusted where the ranks agree on the order:
    an `inferred` group (int_collective_members_matched: the trace names no
    group, so an instance is op + sequence number) ties the k-th all_reduce
    of every rank together even where one rank issued it before an
    all_gather and another after. Such crossing instances give the replay
    graph a cycle (the sampled 128-rank job's ranks 0 and 1, issue 33). The
    rule: per run x iteration x inferred group, every rank's ops in call
    order (op names by arrival) must be the same sequence; where they are
    not, none of that group's members in that iteration is listed, so the
    replay keeps them as rank-local ops (their measured time, waits
    included, as their own work) and fct_step_replay counts them
    (rank_local_comm_count). Groups the trace names, kinds and P2P peers
    are matched by their own sequence and kept.
#}

with

aligned as (
    select
        run_id,
        collective_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        offset_ns,
        arrival_ns,
        match_basis,
        process_group_key,
        seq_scope,
        is_p2p
        and peer_rank is null
        and ranks_matched = 1 as is_peerless_p2p
    from {{ ref('int_collective_members_aligned') }}
),

{# Each rank's ops in an inferred group and iteration, in call order. #}
inferred_orders as (
    select
        run_id,
        process_group_key,
        iteration,
        rank,
        {{ string_agg_ordered('seq_scope', "','", 'arrival_ns, slice_id') }} as op_order
    from aligned
    where match_basis = 'inferred'
    group by 1, 2, 3, 4
),

{# Where the ranks disagree: matching by op and sequence would cross. #}
disordered as (
    select
        run_id,
        process_group_key,
        iteration
    from inferred_orders
    group by 1, 2, 3
    having count(distinct op_order) > 1
),

members as (
    select
        aligned.run_id,
        aligned.collective_id,
        aligned.rank,
        aligned.trace_id,
        aligned.slice_id,
        aligned.iteration,
        aligned.offset_ns,
        aligned.arrival_ns,
        aligned.is_peerless_p2p
    from aligned
    left join disordered
        on
            aligned.run_id = disordered.run_id
            and aligned.process_group_key = disordered.process_group_key
            and aligned.iteration is not distinct from disordered.iteration
            and aligned.match_basis = 'inferred'
    where disordered.run_id is null
),

peerless as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        offset_ns,
        arrival_ns
    from members
    where is_peerless_p2p
),

kernels as (
    select
        trace_id,
        slice_id,
        launch_track_id,
        launch_ts_ns,
        coalesce(in_msg_nelems, 1) > 0 as may_send,
        coalesce(out_msg_nelems, 1) > 0 as may_receive
    from {{ ref('int_kernels_classified') }}
    where kind = 'communication' and launch_ts_ns is not null
),

p2p_calls as (
    select
        function_name,
        sends_next,
        receives_prev,
        sends_prev,
        receives_next
    from {{ ref('megatron_p2p_calls') }}
),

frames as (
    select
        trace_id,
        track_id,
        frame_function,
        ts_ns,
        end_ns
    from {{ ref('int_slices_contextualized') }}
    where
        frame_kind = 'python'
        and frame_function in (select p2p_calls.function_name from p2p_calls)
        and trace_id in (select peerless.trace_id from peerless)
),

ranks as (
    select
        run_id,
        rank,
        pp_stage,
        pp_size,
        pp_group_index
    from {{ ref('int_ranks_placed') }}
    where pp_size > 2
),

{# The helper around each peerless kernel's launch: the innermost one. #}
framed as (
    select
        peerless.*,
        kernels.may_send,
        kernels.may_receive,
        frames.frame_function,
        row_number() over (
            partition by peerless.trace_id, peerless.slice_id
            order by frames.ts_ns desc
        ) as nesting
    from peerless
    inner join kernels
        on
            peerless.trace_id = kernels.trace_id
            and peerless.slice_id = kernels.slice_id
    inner join frames
        on
            kernels.trace_id = frames.trace_id
            and kernels.launch_track_id = frames.track_id
            and kernels.launch_ts_ns >= frames.ts_ns
            and kernels.launch_ts_ns < frames.end_ns
),

calls as (
    select
        framed.*,
        ranks.pp_stage,
        ranks.pp_size,
        ranks.pp_group_index,
        p2p_calls.sends_next,
        p2p_calls.receives_prev,
        p2p_calls.sends_prev,
        p2p_calls.receives_next
    from framed
    inner join p2p_calls
        on framed.frame_function = p2p_calls.function_name
    inner join ranks
        on
            framed.run_id = ranks.run_id
            and framed.rank = ranks.rank
    where framed.nesting = 1
),

{# One row per transfer a call makes: its direction and neighbour. #}
parts as (
    select
        calls.*,
        'send' as direction,
        1 as stage_step
    from calls
    where calls.sends_next and calls.may_send
    union all
    select
        calls.*,
        'recv' as direction,
        -1 as stage_step
    from calls
    where calls.receives_prev and calls.may_receive
    union all
    select
        calls.*,
        'send' as direction,
        -1 as stage_step
    from calls
    where calls.sends_prev and calls.may_send
    union all
    select
        calls.*,
        'recv' as direction,
        1 as stage_step
    from calls
    where calls.receives_next and calls.may_receive
),

peered as (
    select
        parts.*,
        neighbours.rank as peer_rank,
        {# Activations go to the next stage, gradients to the previous. #}
        case
            when (parts.direction = 'send') = (parts.stage_step = 1) then 'forward'
            else 'backward'
        end as flow
    from parts
    inner join ranks as neighbours
        on
            parts.run_id = neighbours.run_id
            and parts.pp_group_index = neighbours.pp_group_index
            and (parts.pp_stage + parts.stage_step + parts.pp_size) % parts.pp_size
            = neighbours.pp_stage
),

channels as (
    select
        run_id,
        trace_id,
        slice_id,
        iteration,
        offset_ns,
        flow,
        case when direction = 'send' then rank else peer_rank end as sender_rank,
        case when direction = 'send' then peer_rank else rank end as receiver_rank,
        arrival_ns
    from peered
),

paired as (
    select
        run_id,
        'p2p_schedule:' || flow || ':' || cast(sender_rank as string) || '>'
        || cast(receiver_rank as string) || '/' || cast(iteration as string) || '/'
        || cast(row_number() over (
            partition by run_id, flow, sender_rank, receiver_rank, iteration, trace_id
            order by arrival_ns, slice_id
        ) as string) as collective_id,
        trace_id,
        slice_id,
        iteration,
        offset_ns
    from channels
),

kept as (
    select
        members.run_id,
        members.collective_id,
        members.trace_id,
        members.slice_id,
        members.iteration,
        members.offset_ns
    from members
    left join paired
        on
            members.trace_id = paired.trace_id
            and members.slice_id = paired.slice_id
    where paired.trace_id is null
),

final as (
    select * from kept
    union all
    select * from paired
)

select * from final
