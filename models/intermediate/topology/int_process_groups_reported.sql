{#
    One row per process group a loaded trace reported (trace_id, source,
    pg_name): the lake's `process_groups` table as stg_lake__process_groups
    reads it, kept as a table per trace (materialized per_trace, keyed
    by trace_id), as int_traces_loaded keeps `traces`.
    Why: int_process_groups_resolved, rebuilt on every build, read the
    groups through the staging view, which opens every trace's
    `process_groups` and `traces` files: 0.6-1.0 s at 512-768 traces and
    3.8-6.6 s at 4,096-5,120 (benchmarks/README.md), growing with the lake.
    Here a build reads only its new traces' files (lake_scan).
#}

{%- set pending = traces_pending() %}

with

process_groups as (
    select *
    from {{ lake_scan('process_groups', pending) }}
    where {{ trace_filter(pending) }}
),

final as (
    select
        {{ lake_columns('process_groups') | indent(8) }}
    from process_groups
)

select * from final
