{#
    One row per CPU-side collective event (trace_id, slice_id): the
    `c10d::*` call, or the `gloo:send`/`gloo:recv` wait on the calling
    thread, with the group kind of its call site (int_cpu_collectives_classified)
    placed in its exact group: the int_process_groups_resolved group of that
    kind holding the rank (each rank is in one group per kind; from the
    topology file or the ranks' `distributedInfo.pg_config`), NULL when
    none or several hold it. fct_cpu_collectives shows it;
    int_comm_calls_matched reads it here.
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

collectives as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        iteration,
        name,
        collective,
        event_type,
        comm_group_kind,
        comm_process_group_kind,
        pattern_id,
        call_site_file,
        call_site_function,
        is_outliving_call_site,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_cpu_collectives_classified') }}
),

process_groups as (
    select
        run_id,
        group_kind,
        group_index,
        ranks,
        group_size,
        pg_name,
        pg_desc
    from {{ ref('int_process_groups_resolved') }}
),

groups_of_ranks as (
    select
        collectives.trace_id,
        collectives.slice_id,
        min(process_groups.group_index) as comm_group_index,
        min(process_groups.group_size) as comm_group_size,
        min(process_groups.pg_name) as comm_pg_name,
        min(process_groups.pg_desc) as comm_pg_desc,
        count(*) as group_count
    from collectives
    inner join process_groups
        on
            collectives.run_id = process_groups.run_id
            and collectives.comm_process_group_kind = process_groups.group_kind
    where {{ array_has('process_groups.ranks', 'collectives.rank') }}
    group by 1, 2
),

final as (
    select
        collectives.run_id,
        collectives.rank,
        collectives.trace_id,
        collectives.slice_id,
        collectives.track_id,
        collectives.iteration,
        collectives.name,
        collectives.collective,
        collectives.event_type,
        collectives.comm_group_kind,
        collectives.comm_process_group_kind,
        case when groups_of_ranks.group_count = 1 then groups_of_ranks.comm_group_index end
            as comm_group_index,
        case when groups_of_ranks.group_count = 1 then groups_of_ranks.comm_group_size end
            as comm_group_size,
        case when groups_of_ranks.group_count = 1 then groups_of_ranks.comm_pg_name end
            as comm_pg_name,
        case when groups_of_ranks.group_count = 1 then groups_of_ranks.comm_pg_desc end
            as comm_pg_desc,
        collectives.pattern_id,
        collectives.call_site_file,
        collectives.call_site_function,
        collectives.is_outliving_call_site,
        collectives.ts_ns,
        collectives.dur_ns,
        collectives.end_ns
    from collectives
    left join groups_of_ranks
        on
            collectives.trace_id = groups_of_ranks.trace_id
            and collectives.slice_id = groups_of_ranks.slice_id
)

select * from final
