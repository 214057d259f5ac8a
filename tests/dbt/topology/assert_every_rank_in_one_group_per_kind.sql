{#
    Every rank of a run is in exactly one group of each kind the run has,
    except the kinds that cover only some ranks (embedding groups: first and
    last pipeline stages) or are not a partition (`other`). Returns the
    offending (run, kind, rank) with how many groups hold it.
#}

with

process_groups as (
    select
        run_id,
        group_kind as kind,
        ranks
    from {{ ref('dim_process_groups') }}
    where group_kind not in ('embedding', 'position_embedding', 'other')
),

ranks as (
    select
        run_id,
        rank
    from {{ ref('dim_ranks') }}
),

members as (
    select
        run_id,
        kind,
        {{ explode_with_position('ranks', 'rank', 'position_in_group') }}
    from process_groups
),

run_kinds as (
    select distinct
        run_id,
        kind
    from process_groups
),

counted as (
    select
        ranks.run_id,
        run_kinds.kind,
        ranks.rank,
        count(members.rank) as group_count
    from ranks
    inner join run_kinds
        on ranks.run_id = run_kinds.run_id
    left join members
        on
            ranks.run_id = members.run_id
            and run_kinds.kind = members.kind
            and ranks.rank = members.rank
    group by 1, 2, 3
)

select * from counted
where group_count != 1
