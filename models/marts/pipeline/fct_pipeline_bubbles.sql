{#
    One row per run x pp group x iteration x pipeline stage: how much of the
    group's pipeline window the stage spent idle (ARCHITECTURE.md, "Metric
    definitions"), against the 1F1B / interleaved theory. The window, the
    stage's work, busy and bubble time and the theoretical ratio are
    computed in int_pipeline_stages_windowed, which documents them.
#}

with

final as (
    select
        run_id,
        pp_group_index,
        iteration,
        pp_stage,
        rank,
        timing_source,
        group_start_ns,
        group_end_ns,
        group_span_ns,
        stage_start_ns,
        stage_end_ns,
        work_count,
        busy_ns,
        bubble_ns,
        bubble_ratio,
        theoretical_bubble_ratio,
        microbatches,
        vpp_size,
        pp_size
    from {{ ref('int_pipeline_stages_windowed') }}
)

select * from final
