{#
    Every parallel group of a run, from the most trusted source that has
    groups of that kind (per run and kind):

      1. topology_json: the Megatron patch's (or the simulator's) dump;
      2. traceviz_txt:  Megatron-TraceViz's unique_parallel_groups_*.txt;
      3. pg_config:     the union over all ranks' traces of
                        distributedInfo.pg_config (each rank lists only the
                        groups it belongs to), kind from Megatron's group_desc;
      4. generated:     a file written by `tracehouse topology --out`.

    Several files of one source in a run: the latest (mtime) wins. Groups a
    less trusted source disagrees with are named in conflicting_sources (a
    warn-severity test reports them).
#}

with

topology_groups as (
    select
        run_id,
        topology_id,
        source,
        kind,
        group_index,
        ranks,
        pg_name,
        pg_desc,
        world_size,
        path,
        mtime_ns
    from {{ ref('stg_lake__topology_groups') }}
),

process_groups as (
    select
        run_id,
        pg_name,
        pg_desc,
        ranks
    from {{ ref('int_process_groups_reported') }}
),

{# Megatron's group_desc (torch's pg_desc) -> topology kind: the exact rows
   (pg_desc set) of the process_group_kinds seed, the one definition (the
   Python constant tracehouse.topology.GROUP_DESCRIPTIONS is tested equal to
   it). Descriptions not listed (other libraries' groups, `undefined`)
   become kind `other`. #}
group_descriptions as (
    select
        pg_desc,
        topology_kind as kind
    from {{ ref('process_group_kinds') }}
    where pg_desc is not null
),

source_trust as (
    select *
    from (
        values
        ('topology_json', 1),
        ('traceviz_txt', 2),
        ('pg_config', 3),
        ('generated', 4)
    ) as trust (source, trust_rank)  -- noqa: AL05
),

{# One topology file per run and source: the latest. #}
latest_files as (
    select
        run_id,
        source,
        topology_id,
        path
    from (
        select
            run_id,
            source,
            topology_id,
            path,
            row_number() over (
                partition by run_id, source
                order by mtime_ns desc, topology_id desc
            ) as recency
        from topology_groups
    ) as files
    where recency = 1
),

file_groups as (
    select
        topology_groups.run_id,
        topology_groups.source,
        topology_groups.path,
        topology_groups.kind,
        topology_groups.group_index as source_index,
        topology_groups.ranks,
        topology_groups.pg_name,
        topology_groups.pg_desc
    from topology_groups
    inner join latest_files
        on
            topology_groups.run_id = latest_files.run_id
            and topology_groups.topology_id = latest_files.topology_id
),

{# A topology file rarely lists the default group: every rank of the layout. #}
file_world_groups as (
    select distinct
        topology_groups.run_id,
        topology_groups.source,
        topology_groups.path,
        'world' as kind,
        cast(0 as bigint) as source_index,
        {{ integer_range('0', 'topology_groups.world_size') }} as ranks,
        cast(null as string) as pg_name,
        cast(null as string) as pg_desc
    from topology_groups
    inner join latest_files
        on
            topology_groups.run_id = latest_files.run_id
            and topology_groups.topology_id = latest_files.topology_id
    where topology_groups.world_size is not null
),

pg_config_groups as (
    select distinct
        process_groups.run_id,
        'pg_config' as source,  -- noqa: RF04
        'traces' as path,  -- noqa: RF04
        coalesce(group_descriptions.kind, 'other') as kind,
        cast(null as bigint) as source_index,
        process_groups.ranks,
        process_groups.pg_name,
        process_groups.pg_desc
    from process_groups
    left join group_descriptions
        on process_groups.pg_desc = group_descriptions.pg_desc
),

candidates as (
    select * from file_groups
    union all
    select * from file_world_groups
    union all
    select * from pg_config_groups
),

ranked as (
    select
        candidates.*,
        source_trust.trust_rank,
        {{ sorted_array_key('candidates.ranks') }} as ranks_key
    from candidates
    inner join source_trust
        on candidates.source = source_trust.source
),

{# Per run and kind, the most trusted source that has that kind. #}
chosen_sources as (
    select
        run_id,
        kind,
        min(trust_rank) as trust_rank
    from ranked
    group by 1, 2
),

chosen as (
    select ranked.*
    from ranked
    inner join chosen_sources
        on
            ranked.run_id = chosen_sources.run_id
            and ranked.kind = chosen_sources.kind
            and ranked.trust_rank = chosen_sources.trust_rank
),

{# pg_name/pg_desc from the traces when the chosen source does not give them. #}
trace_names as (
    select
        run_id,
        kind,
        ranks_key,
        min(pg_name) as pg_name,
        min(pg_desc) as pg_desc
    from ranked
    where source = 'pg_config'
    group by 1, 2, 3
),

{# A less trusted source disagrees with a group when it has a group of the
   same kind sharing a rank with it but holding other ranks. #}
conflicts as (
    select
        chosen.run_id,
        chosen.kind,
        chosen.ranks_key,
        {% set conflict_text -%}
            other.source || ' (' || other.path || ') has [' || other.ranks_key || ']'
        {%- endset -%}
        {{ string_agg_ordered(conflict_text, "'; '", conflict_text, distinct=true) }}
            as conflicting_sources
    from chosen
    inner join ranked as other
        on
            chosen.run_id = other.run_id
            and chosen.kind = other.kind
            and chosen.trust_rank < other.trust_rank
            and chosen.ranks_key != other.ranks_key
            and {{ arrays_overlap('chosen.ranks', 'other.ranks') }}
    group by 1, 2, 3
),

final as (
    select
        chosen.run_id,
        chosen.kind as group_kind,
        cast(row_number() over (
            partition by chosen.run_id, chosen.kind
            order by
                chosen.source_index,
                try_cast(coalesce(chosen.pg_name, trace_names.pg_name) as bigint),
                {{ array_element('chosen.ranks', 1) }},
                chosen.ranks_key
        ) - 1 as bigint) as group_index,
        case
            when chosen.kind in ('tp', 'cp', 'ep', 'dp', 'pp', 'embedding', 'world')
                then chosen.kind
            when chosen.kind = 'mp' then 'model'
            else 'other'
        end as kind,
        chosen.ranks,
        chosen.ranks_key,
        cast({{ array_length('chosen.ranks') }} as bigint) as group_size,
        coalesce(chosen.pg_name, trace_names.pg_name) as pg_name,
        coalesce(chosen.pg_desc, trace_names.pg_desc) as pg_desc,
        chosen.source,
        case when chosen.source = 'pg_config' then null else chosen.path end as source_path,
        conflicts.conflicting_sources
    from chosen
    left join trace_names
        on
            chosen.run_id = trace_names.run_id
            and chosen.kind = trace_names.kind
            and chosen.ranks_key = trace_names.ranks_key
    left join conflicts
        on
            chosen.run_id = conflicts.run_id
            and chosen.kind = conflicts.kind
            and chosen.ranks_key = conflicts.ranks_key
)

select * from final
