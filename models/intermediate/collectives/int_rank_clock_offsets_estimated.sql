{#
    One row per rank of a run (run_id, rank): the correction that puts the
    rank's timestamps on the reference clock, offset_ns = reference clock -
    rank clock (aligned time = trace time + offset_ns). Clocks belong to
    hosts, so offsets are estimated per host (dim_ranks.host_name; a rank
    without a host name shares the clock of the ranks whose traces come from
    the same Nsight export, which one nsys process on one host wrote, else
    is its own), the reference being the host of the run's lowest rank
    (offset 0).

    Modes (var clock_offset_mode; `auto` by default):
      * collectives: the members of a matched GPU collective finish together
        (NCCL ends a collective on every rank at once, give or take the
        last hop), so each collective holding ranks of both hosts gives one
        estimate, reference host's end - host's end (the median end of its
        members on each host); the host's offset is the median over those
        collectives, robust to the odd late-ending member. A host sharing no
        collective with the reference goes through the host sharing most
        collectives with both (two hops). CPU (gloo) calls return before the
        transfer completes, so they are not used.
      * first_step: the first ProfilerStep of the earliest iteration every
        rank traced starts together (median over the host's ranks).
      * none: every offset 0.
      * auto: collectives where a host has an estimate, else 0 on the
        reference host, else first_step, else none; `mode` says which each
        rank got.
    A per-run table rebuilt each time.
#}

{%- set mode = clock_offset_mode() %}

with

members as (
    select
        run_id,
        collective_id,
        rank,
        device,
        ranks_expected,
        end_ns
    from {{ ref('int_collective_members_matched') }}
),

ranks as (
    select
        run_id,
        rank,
        host_name
    from {{ ref('int_ranks_placed') }}
),

steps as (
    select
        trace_id,
        step_number,
        ts_ns
    from {{ ref('int_step_windows_resolved') }}
),

traces as (
    select
        trace_id,
        run_id,
        rank,
        file_format,
        path
    from {{ ref('int_traces_loaded') }}
),

{# The GPUs of one Nsight export: one file, one host's clock. #}
nsys_exports as (
    select
        run_id,
        rank,
        min(path) as export_path
    from traces
    where file_format = 'nsys_sqlite'
    group by 1, 2
),

hosts as (
    select
        ranks.run_id,
        ranks.rank,
        coalesce(
            ranks.host_name,
            'nsys export ' || nsys_exports.export_path,
            'rank ' || cast(ranks.rank as string)
        ) as host_key
    from ranks
    left join nsys_exports
        on
            ranks.run_id = nsys_exports.run_id
            and ranks.rank = nsys_exports.rank
),

reference_hosts as (
    select
        run_id,
        host_key as reference_host
    from (
        select
            run_id,
            host_key,
            row_number() over (partition by run_id order by rank) as rank_order
        from hosts
    ) as ordered_hosts
    where rank_order = 1
),

{# Collectives matched on every member, on at least two ranks. #}
complete_collectives as (
    select
        run_id,
        collective_id
    from members
    where device = 'gpu'
    group by 1, 2
    having count(*) = min(ranks_expected) and count(*) >= 2
),

{# Ends relative to the collective's first end: small numbers, exact through median. #}
host_ends as (
    select
        members.run_id,
        members.collective_id,
        hosts.host_key,
        median(members.end_ns - members.first_end_ns) as end_ns
    from (
        select
            *,
            min(end_ns) over (partition by run_id, collective_id) as first_end_ns
        from members
    ) as members
    inner join complete_collectives
        on
            members.run_id = complete_collectives.run_id
            and members.collective_id = complete_collectives.collective_id
    inner join hosts
        on
            members.run_id = hosts.run_id
            and members.rank = hosts.rank
    group by 1, 2, 3
),

{# One estimate per collective and pair of hosts in it: offset of `host_key` against `from_host`. #}
pair_estimates as (
    select
        from_ends.run_id,
        from_ends.host_key as from_host,
        to_ends.host_key,
        median(from_ends.end_ns - to_ends.end_ns) as offset_ns,
        count(*) as collective_count
    from host_ends as from_ends
    inner join host_ends as to_ends
        on
            from_ends.run_id = to_ends.run_id
            and from_ends.collective_id = to_ends.collective_id
            and from_ends.host_key != to_ends.host_key
    group by 1, 2, 3
),

direct as (
    select
        pair_estimates.run_id,
        pair_estimates.host_key,
        pair_estimates.offset_ns,
        pair_estimates.collective_count
    from pair_estimates
    inner join reference_hosts
        on
            pair_estimates.run_id = reference_hosts.run_id
            and pair_estimates.from_host = reference_hosts.reference_host
),

{# Hosts without a direct estimate: through the linked host sharing most collectives. #}
two_hop_candidates as (
    select
        hop.run_id,
        hop.host_key,
        direct.offset_ns + hop.offset_ns as offset_ns,
        least(direct.collective_count, hop.collective_count) as collective_count
    from pair_estimates as hop
    inner join direct
        on
            hop.run_id = direct.run_id
            and hop.from_host = direct.host_key
    inner join reference_hosts
        on hop.run_id = reference_hosts.run_id
    where
        hop.host_key != reference_hosts.reference_host
        and not exists (
            select 1
            from direct as linked
            where linked.run_id = hop.run_id and linked.host_key = hop.host_key
        )
),

two_hop as (
    {{ first_match(
        'two_hop_candidates', ['run_id', 'host_key'], ['collective_count desc', 'offset_ns asc'],
    ) }}
),

collective_offsets as (
    select
        run_id,
        host_key,
        offset_ns,
        collective_count
    from direct
    union all
    select
        run_id,
        host_key,
        offset_ns,
        collective_count
    from two_hop
),

{# first_step: the earliest iteration every traced rank of the run has a step of. #}
rank_steps as (
    select
        traces.run_id,
        traces.rank,
        steps.step_number,
        min(steps.ts_ns) as step_start_ns
    from steps
    inner join traces
        on steps.trace_id = traces.trace_id
    group by 1, 2, 3
),

run_rank_counts as (
    select
        run_id,
        count(distinct rank) as rank_count
    from rank_steps
    group by 1
),

step_rank_counts as (
    select
        run_id,
        step_number,
        count(distinct rank) as rank_count,
        min(step_start_ns) as base_ns
    from rank_steps
    group by 1, 2
),

first_common_steps as (
    select
        step_rank_counts.run_id,
        step_rank_counts.step_number,
        step_rank_counts.base_ns,
        row_number() over (
            partition by step_rank_counts.run_id order by step_rank_counts.step_number
        ) as step_order
    from step_rank_counts
    inner join run_rank_counts
        on
            step_rank_counts.run_id = run_rank_counts.run_id
            and step_rank_counts.rank_count = run_rank_counts.rank_count
),

{# Step starts relative to the step's first start: small numbers, exact through median. #}
first_steps as (
    select
        rank_steps.run_id,
        hosts.host_key,
        median(rank_steps.step_start_ns - first_common_steps.base_ns) as step_start_ns
    from rank_steps
    inner join first_common_steps
        on
            rank_steps.run_id = first_common_steps.run_id
            and rank_steps.step_number = first_common_steps.step_number
    inner join hosts
        on
            rank_steps.run_id = hosts.run_id
            and rank_steps.rank = hosts.rank
    where first_common_steps.step_order = 1
    group by 1, 2
),

first_step_offsets as (
    select
        first_steps.run_id,
        first_steps.host_key,
        cast(round(reference_steps.step_start_ns - first_steps.step_start_ns) as bigint)
            as offset_ns
    from first_steps
    inner join reference_hosts
        on first_steps.run_id = reference_hosts.run_id
    inner join first_steps as reference_steps
        on
            reference_hosts.run_id = reference_steps.run_id
            and reference_hosts.reference_host = reference_steps.host_key
),

candidates as (
    select
        hosts.run_id,
        hosts.rank,
        hosts.host_key,
        reference_hosts.reference_host,
        hosts.host_key = reference_hosts.reference_host as is_reference_host,
        cast(round(collective_offsets.offset_ns) as bigint) as collectives_offset_ns,
        coalesce(collective_offsets.collective_count, 0) as collective_count,
        first_step_offsets.offset_ns as first_step_offset_ns,
        max(case when collective_offsets.offset_ns is not null then 1 else 0 end)
            over (partition by hosts.run_id)
        = 1 as run_has_collective_offsets,
        '{{ mode }}' as requested_mode
    from hosts
    inner join reference_hosts
        on hosts.run_id = reference_hosts.run_id
    left join collective_offsets
        on
            hosts.run_id = collective_offsets.run_id
            and hosts.host_key = collective_offsets.host_key
    left join first_step_offsets
        on
            hosts.run_id = first_step_offsets.run_id
            and hosts.host_key = first_step_offsets.host_key
),

chosen as (
    select
        candidates.*,
        case
            when candidates.requested_mode = 'none' then 'none'
            when candidates.requested_mode = 'first_step'
                then case
                    when
                        candidates.is_reference_host
                        or candidates.first_step_offset_ns is not null
                        then 'first_step'
                    else 'none'
                end
            when candidates.requested_mode = 'collectives'
                then case
                    when
                        candidates.is_reference_host
                        or candidates.collectives_offset_ns is not null
                        then 'collectives'
                    else 'none'
                end
            when candidates.collectives_offset_ns is not null then 'collectives'
            when
                candidates.is_reference_host and candidates.run_has_collective_offsets
                then 'collectives'
            when candidates.is_reference_host then 'none'
            when candidates.first_step_offset_ns is not null then 'first_step'
            else 'none'
        end as mode  -- noqa: RF04
    from candidates
),

final as (
    select
        run_id,
        rank,
        host_key,
        reference_host,
        is_reference_host,
        mode,
        case
            when is_reference_host then cast(0 as bigint)
            when mode = 'collectives' then collectives_offset_ns
            when mode = 'first_step' then first_step_offset_ns
            else cast(0 as bigint)
        end as offset_ns,
        collectives_offset_ns,
        collective_count,
        first_step_offset_ns
    from chosen
)

select * from final
