{#
    One row per island of GPU busy time: run x rank x iteration x kind x
    island. Kinds are compute, communication, memory, and `all` (every
    kernel, copy and fill, whatever its kind) for span and idle.

    Gaps and islands (macro merge_intervals): an interval opens a new
    island when it starts strictly after the largest end seen before it in
    its partition, so touching intervals (start = previous end) merge and
    nested ones are swallowed. One sort and two running windows per
    partition; no pairwise interval join. Bounds are int_kernels_launched's
    interval_start_ns/interval_end_ns (var('kernel_time_unit_ns')).
    Incremental by run x rank x iteration (macros/incremental_traces.sql):
    a build recomputes only the iterations of ranks whose traces changed.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete('partition') }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

kernels as (
    select
        run_id,
        rank,
        iteration,
        kind,
        interval_start_ns as ts_ns,
        interval_end_ns as end_ns
    from {{ ref('int_kernels_launched') }}
    where {{ incremental_traces_where('partition') }}
),

intervals as (
    select
        run_id,
        rank,
        iteration,
        kind,
        ts_ns,
        end_ns
    from kernels
    union all
    select
        run_id,
        rank,
        iteration,
        'all' as kind,
        ts_ns,
        end_ns
    from kernels
),

merged as (
    {{ merge_intervals(
        'intervals',
        ['run_id', 'rank', 'iteration', 'kind'],
        'ts_ns',
        'end_ns',
    ) }}
),

final as (
    select * from merged
)

select * from final
