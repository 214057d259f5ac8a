{#
    Expected vs observed collectives, for runs that have both a comm log of
    their layout (ingested under the same run name, e.g. `tracehouse ingest
    COMMTRACE_DIR --run RUN`) and profiled traces. Per rank and observed
    iteration, the expected sequence of each collective family on each
    group (the comm log's in-step records, int_comm_calls_grouped) is lined
    up in order with the collectives the traces show: the communication
    kernels (int_kernels_placed, fct_kernels' rows) in runs that have them
    (GPU), else the c10d calls (int_cpu_collectives_placed,
    fct_cpu_collectives' rows; CPU, gloo), each with the group its
    process-group args or call site give, resolved to ranks through
    int_process_groups_resolved. Groups compare as sorted rank sets; P2P
    compares per direction family (send, recv) without the peer, which CPU
    traces do not carry. Every row gets its status: matched (pass 1),
    matched_by_order (pass 2), expected_only or observed_only;
    fct_comm_expected_vs_observed shows the rows and says what differs.
#}

with

expected_calls as (
    select
        run_id,
        rank,
        seq,
        op,
        collective,
        is_p2p,
        group_kind,
        group_ranks,
        bytes,
        call_site,
        coalesced_index
    from {{ ref('int_comm_calls_grouped') }}
    where
        coalesce(in_step, true)
        and collective <> 'other'
        {# a coalesced call is one c10d call in a profile: count its first op only #}
        and coalesce(coalesced_index, 0) = 0
),

{# Only runs with a comm log are compared: the observed side reads
   nothing of the others (every communication kernel of a large warehouse
   without comm logs cost 6-7 s per build at 1,024 ranks x 4 iterations). #}
expected_runs as (
    select distinct run_id
    from expected_calls
),

gpu_collectives as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        name,
        coalesce(collective_name, name) as collective,
        comm_process_group_kind,
        comm_group_kind,
        comm_group_index,
        cast(null as string) as call_site_file,
        cast(null as string) as call_site_function,
        ts_ns
    from {{ ref('int_kernels_placed') }}
    where
        kind = 'communication'
        and run_id in (select expected_runs.run_id from expected_runs)
),

cpu_collectives as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        name,
        collective,
        comm_process_group_kind,
        comm_group_kind,
        comm_group_index,
        call_site_file,
        call_site_function,
        ts_ns
    from {{ ref('int_cpu_collectives_placed') }}
    where
        event_type = 'call'
        and run_id in (select expected_runs.run_id from expected_runs)
),

{# A run with communication kernels is compared on the GPU side (its CPU
   c10d calls launch those kernels and would count twice); a run without
   (gloo) on the CPU side. #}
gpu_runs as (
    select distinct run_id
    from gpu_collectives
),

observed_calls as (
    select
        *,
        'gpu' as observed_side
    from gpu_collectives
    union all
    select
        cpu_collectives.*,
        'cpu' as observed_side
    from cpu_collectives
    left join gpu_runs
        on cpu_collectives.run_id = gpu_runs.run_id
    where gpu_runs.run_id is null
),

process_groups as (
    select
        run_id,
        group_kind,
        group_index,
        ranks
    from {{ ref('int_process_groups_resolved') }}
),

both_runs as (
    select distinct expected_calls.run_id
    from expected_calls
    inner join observed_calls
        on expected_calls.run_id = observed_calls.run_id
),

observed_keyed as (
    select
        observed_calls.*,
        {{ comm_collective_family('observed_calls.collective') }} as observed_collective,
        case
            when {{ comm_collective_family('observed_calls.collective') }} in ('send', 'recv')
                then 'p2p'
            else {{ sorted_array_key('process_groups.ranks') }}
        end as match_key
    from observed_calls
    inner join both_runs
        on observed_calls.run_id = both_runs.run_id
    left join process_groups
        on
            observed_calls.run_id = process_groups.run_id
            and observed_calls.comm_process_group_kind = process_groups.group_kind
            and observed_calls.comm_group_index = process_groups.group_index
),

observed_numbered as (
    select
        observed_keyed.*,
        row_number() over (
            partition by
                observed_keyed.run_id,
                observed_keyed.rank,
                observed_keyed.iteration,
                observed_keyed.observed_collective,
                observed_keyed.match_key
            order by observed_keyed.ts_ns, observed_keyed.slice_id
        ) as match_seq
    from observed_keyed
),

iterations as (
    select distinct
        run_id,
        rank,
        iteration
    from observed_calls
),

expected_numbered as (
    select
        expected_calls.*,
        case
            when expected_calls.is_p2p then 'p2p'
            else {{ sorted_array_key('expected_calls.group_ranks') }}
        end as match_key,
        row_number() over (
            partition by
                expected_calls.run_id,
                expected_calls.rank,
                expected_calls.collective,
                case
                    when expected_calls.is_p2p then 'p2p'
                    else {{ sorted_array_key('expected_calls.group_ranks') }}
                end
            order by expected_calls.seq
        ) as match_seq
    from expected_calls
    inner join both_runs
        on expected_calls.run_id = both_runs.run_id
),

expected_per_iteration as (
    select
        expected_numbered.*,
        iterations.iteration
    from expected_numbered
    inner join iterations
        on
            expected_numbered.run_id = iterations.run_id
            and expected_numbered.rank = iterations.rank
),

observed_resolved as (
    select *
    from observed_numbered
    where match_key is not null
),

{# Pass 1: the same family on the same group (sorted rank set), n-th to n-th. #}
exact as (
    select
        expected.run_id as expected_run_id,
        expected.rank as expected_rank,
        expected.iteration as expected_iteration,
        expected.collective as expected_collective,
        expected.match_key as expected_key,
        expected.match_seq as expected_match_seq,
        expected.group_kind as expected_group_kind,
        expected.seq as expected_seq,
        expected.op as expected_op,
        expected.bytes as expected_bytes,
        expected.call_site as expected_call_site,
        observed.run_id as observed_run_id,
        observed.rank as observed_rank,
        observed.iteration as observed_iteration,
        observed.observed_collective as observed_family,
        observed.match_key as observed_key,
        observed.match_seq as observed_match_seq,
        observed.observed_side,
        observed.trace_id as observed_trace_id,
        observed.slice_id as observed_slice_id,
        observed.name as observed_name,
        observed.ts_ns as observed_ts_ns,
        observed.comm_process_group_kind as observed_group_kind,
        observed.call_site_file as observed_call_site_file,
        observed.call_site_function as observed_call_site_function
    from expected_per_iteration as expected
    full outer join observed_resolved as observed
        on
            expected.run_id = observed.run_id
            and expected.rank = observed.rank
            and expected.iteration = observed.iteration
            and expected.collective = observed.observed_collective
            and expected.match_key = observed.match_key
            and expected.match_seq = observed.match_seq
),

{# Pass 2: observed calls whose group the call site does not tell (no seed
   frame holds them) take the expected calls pass 1 left over, in order,
   within the same rank, iteration and family. #}
expected_left as (
    select
        exact.*,
        row_number() over (
            partition by
                exact.expected_run_id,
                exact.expected_rank,
                exact.expected_iteration,
                exact.expected_collective
            order by exact.expected_seq
        ) as fallback_seq
    from exact
    where exact.observed_run_id is null
),

observed_left as (
    select
        observed_numbered.*,
        row_number() over (
            partition by
                observed_numbered.run_id,
                observed_numbered.rank,
                observed_numbered.iteration,
                observed_numbered.observed_collective
            order by observed_numbered.ts_ns, observed_numbered.slice_id
        ) as fallback_seq
    from observed_numbered
    where observed_numbered.match_key is null
),

by_order as (
    select
        expected_left.expected_run_id,
        expected_left.expected_rank,
        expected_left.expected_iteration,
        expected_left.expected_collective,
        expected_left.expected_key,
        expected_left.expected_match_seq,
        expected_left.expected_group_kind,
        expected_left.expected_seq,
        expected_left.expected_op,
        expected_left.expected_bytes,
        expected_left.expected_call_site,
        observed_left.run_id as observed_run_id,
        observed_left.rank as observed_rank,
        observed_left.iteration as observed_iteration,
        observed_left.observed_collective as observed_family,
        observed_left.match_key as observed_key,
        observed_left.fallback_seq as observed_match_seq,
        observed_left.observed_side,
        observed_left.trace_id as observed_trace_id,
        observed_left.slice_id as observed_slice_id,
        observed_left.name as observed_name,
        observed_left.ts_ns as observed_ts_ns,
        observed_left.comm_process_group_kind as observed_group_kind,
        observed_left.call_site_file as observed_call_site_file,
        observed_left.call_site_function as observed_call_site_function
    from expected_left
    full outer join observed_left
        on
            expected_left.expected_run_id = observed_left.run_id
            and expected_left.expected_rank = observed_left.rank
            and expected_left.expected_iteration = observed_left.iteration
            and expected_left.expected_collective = observed_left.observed_collective
            and expected_left.fallback_seq = observed_left.fallback_seq
),

lined_up as (
    select
        *,
        case when expected_run_id is not null and observed_run_id is not null then 'matched' end
            as pass_status
    from exact
    where observed_run_id is not null
    union all
    select
        *,
        case
            when expected_run_id is not null and observed_run_id is not null
                then 'matched_by_order'
        end as pass_status
    from by_order
),

final as (
    select
        coalesce(expected_run_id, observed_run_id) as run_id,
        coalesce(expected_rank, observed_rank) as rank,
        coalesce(expected_iteration, observed_iteration) as iteration,
        coalesce(expected_collective, observed_family) as collective,
        coalesce(expected_key, observed_key) as group_key,
        coalesce(expected_match_seq, observed_match_seq) as match_seq,
        coalesce(expected_group_kind, observed_group_kind) as group_kind,
        expected_seq,
        expected_op,
        expected_group_kind,
        expected_bytes,
        expected_call_site,
        observed_side,
        observed_trace_id,
        observed_slice_id,
        observed_name,
        observed_ts_ns,
        observed_group_kind,
        observed_call_site_file,
        observed_call_site_function,
        coalesce(
            pass_status,
            case when expected_run_id is not null then 'expected_only' else 'observed_only' end
        ) as status
    from lined_up
)

select * from final
