{#
    One row per vertex on a run x iteration's critical path (run_id,
    iteration, path_step): the `path` rows of int_replay_graph_walked (a
    dbt Python model that weighs, replays and walks the graph once; its
    docstring says how the path is walked), as a view so the marts read
    the grain they need.
#}

{{ config(materialized='view') }}

with

walked as (
    select
        run_id,
        iteration,
        path_step,
        node_id,
        point,
        segment,
        segment_ns
    from {{ ref('int_replay_graph_walked') }}
    where row_kind = 'path'
),

final as (
    select * from walked
)

select * from final
