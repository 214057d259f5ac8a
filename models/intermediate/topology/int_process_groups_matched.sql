{#
    One row per process group named by communication kernels' args, per run
    and rank: (run_id, rank, process_group_desc, process_group_name,
    process_group_ranks_key), with the run's group it is (few rows: one per
    group a rank talks in, not one per kernel). A per-run lookup rebuilt
    each time, so a new topology file or new traces of the run re-resolve
    every kernel without recomputing the per-trace kernel table.

    The exact group: the int_process_groups_resolved group with the same
    ranks (else, without ranks, the same pg name with the rank a member);
    among groups with the same ranks (tp, etp, tp_cp, ... often coincide)
    the one whose pg_desc, then pg_name, also matches; never a group of
    another run. desc_group_kind: the `process_group_kinds` seed's first
    pattern matching the description (macro first_match).
#}

with

kernels as (
    select
        run_id,
        rank,
        process_group_desc,
        process_group_name,
        process_group_ranks_key
    from {{ ref('int_kernels_classified') }}
    where kind = 'communication'
),

process_groups as (
    select
        run_id,
        group_kind,
        group_index,
        kind,
        ranks,
        ranks_key,
        pg_name,
        pg_desc
    from {{ ref('int_process_groups_resolved') }}
),

group_patterns as (
    select
        pattern_id,
        priority,
        group_kind,
        pattern
    from {{ ref('process_group_kinds') }}
),

group_keys as (
    select distinct
        run_id,
        rank,
        process_group_desc,
        process_group_name,
        process_group_ranks_key
    from kernels
),

desc_candidates as (
    select
        descs.process_group_desc,
        group_patterns.group_kind,
        group_patterns.priority,
        group_patterns.pattern_id
    from (
        select distinct process_group_desc
        from group_keys
        where process_group_desc is not null
    ) as descs
    inner join group_patterns
        on {{ regex_matches('descs.process_group_desc', 'group_patterns.pattern') }}
),

desc_kinds as (
    {{ first_match('desc_candidates', ['process_group_desc'], ['priority', 'pattern_id']) }}
),

group_candidates as (
    select
        group_keys.*,
        process_groups.group_kind as matched_group_kind,
        process_groups.group_index as matched_group_index,
        process_groups.kind as matched_kind,
        coalesce(process_groups.pg_desc = group_keys.process_group_desc, false) as is_desc_match,
        coalesce(process_groups.pg_name = group_keys.process_group_name, false) as is_name_match
    from group_keys
    inner join process_groups
        on
            group_keys.run_id = process_groups.run_id
            and group_keys.process_group_ranks_key = process_groups.ranks_key
    union all
    select
        group_keys.*,
        process_groups.group_kind as matched_group_kind,
        process_groups.group_index as matched_group_index,
        process_groups.kind as matched_kind,
        coalesce(process_groups.pg_desc = group_keys.process_group_desc, false) as is_desc_match,
        true as is_name_match
    from group_keys
    inner join process_groups
        on
            group_keys.run_id = process_groups.run_id
            and group_keys.process_group_name = process_groups.pg_name
    where
        group_keys.process_group_ranks_key is null
        and {{ array_has('process_groups.ranks', 'group_keys.rank') }}
),

group_matches as (
    {{ first_match(
        'group_candidates',
        ['run_id', 'rank', 'process_group_desc', 'process_group_name', 'process_group_ranks_key'],
        [
            'is_desc_match desc', 'is_name_match desc',
            'matched_group_kind asc', 'matched_group_index asc',
        ],
    ) }}
),

final as (
    select
        group_keys.run_id,
        group_keys.rank,
        group_keys.process_group_desc,
        group_keys.process_group_name,
        group_keys.process_group_ranks_key,
        desc_kinds.group_kind as desc_group_kind,
        group_matches.matched_group_kind,
        group_matches.matched_group_index,
        group_matches.matched_kind
    from group_keys
    left join desc_kinds
        on group_keys.process_group_desc = desc_kinds.process_group_desc
    left join group_matches
        on
            group_keys.run_id = group_matches.run_id
            and group_keys.rank = group_matches.rank
            and group_keys.process_group_desc is not distinct from group_matches.process_group_desc
            and group_keys.process_group_name is not distinct from group_matches.process_group_name
            and group_keys.process_group_ranks_key
            is not distinct from group_matches.process_group_ranks_key
)

select * from final
