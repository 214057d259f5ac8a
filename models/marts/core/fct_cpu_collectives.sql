{#
    One row per CPU-side collective event (trace_id, slice_id): the `c10d::*`
    call or the `gloo:send`/`gloo:recv` wait, with the group kind of its call
    site and its exact group, as int_cpu_collectives_placed places them (the
    rules live there, so that no intermediate model reads a mart).
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

final as (
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
        comm_group_index,
        comm_group_size,
        comm_pg_name,
        comm_pg_desc,
        pattern_id,
        call_site_file,
        call_site_function,
        is_outliving_call_site,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_cpu_collectives_placed') }}
)

select * from final
