{#
    One row per scenario x run x rank x iteration with GPU work: the rank's
    GPU span in the iteration as replayed with the scenario's weights,
    beside the measured span and what the replay does not explain. The
    `span` rows of int_replay_graph_walked (a dbt Python model that weighs,
    replays and walks the graph once; its docstring says how), as a view
    so the marts read the grain they need.
#}

{{ config(materialized='view') }}

with

walked as (
    select
        scenario,
        run_id,
        rank,
        iteration,
        gpu_op_count,
        measured_span_ns,
        replayed_span_ns,
        start_delay_ns,
        unlaunched_op_count,
        inconsistent_node_count,
        rank_local_comm_count
    from {{ ref('int_replay_graph_walked') }}
    where row_kind = 'span'
),

final as (
    select * from walked
)

select * from final
