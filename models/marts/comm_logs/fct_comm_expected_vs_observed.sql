{#
    Expected vs observed collectives, for runs that have both a comm log of
    their layout (ingested under the same run name, e.g. `tracehouse ingest
    COMMTRACE_DIR --run RUN`) and profiled traces: the comm log's in-step
    calls lined up with the communication kernels (GPU runs) or c10d calls
    (gloo runs) the traces show, per rank, observed iteration, family and
    group. The matching is int_comm_calls_matched, which documents it; here
    every row not matched exactly gets `difference`, a sentence naming what
    differs.
#}

with

lined_up as (
    select
        run_id,
        rank,
        iteration,
        collective,
        group_key,
        match_seq,
        group_kind,
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
        status
    from {{ ref('int_comm_calls_matched') }}
),

final as (
    select
        run_id,
        rank,
        iteration,
        collective,
        group_key,
        match_seq,
        group_kind,
        expected_seq,
        expected_op,
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
        status,
        {# On an unmatched row one side is empty, so group_key and match_seq
           are that of the side present; a row matched by order has the
           expected side's group (its observed call has none). #}
        case status
            when 'matched' then null
            when 'matched_by_order'
                then
                    'observed ' || observed_name || ' has no group from its call site; '
                    || 'matched by order to expected ' || expected_op || ' on '
                    || coalesce(expected_group_kind, 'group') || ' [' || group_key || ']'
            when 'expected_only'
                then
                    'expected ' || expected_op || ' #' || cast(match_seq as string)
                    || ' on ' || coalesce(expected_group_kind, 'group') || ' [' || group_key
                    || '] not observed in this iteration (call site '
                    || coalesce(expected_call_site, 'unknown') || ')'
            else
                'observed ' || observed_name || ' #' || cast(match_seq as string)
                || ' on ' || coalesce(observed_group_kind, 'an unresolved group')
                || coalesce(' [' || group_key || ']', '')
                || ' has no expected counterpart in the comm log'
        end as difference
    from lined_up
)

select * from final
