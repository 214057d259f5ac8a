{#
    One row per run x pp group x iteration x stage x schedule part
    (warmup, steady, cooldown): where a stage's pipeline bubble lies in the
    schedule and what the stage was doing instead of its own work
    (p2p_wait, dp_wait, collective_wait, other_kernel, idle). The sweep that
    splits the bubble is int_bubble_parts_swept, which documents the rules;
    the parts of a stage add up to its fct_pipeline_bubbles.bubble_ns.
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
        schedule_part,
        part_order,
        part_start_ns,
        part_end_ns,
        group_span_ns,
        busy_ns,
        bubble_ns,
        p2p_wait_ns,
        dp_wait_ns,
        collective_wait_ns,
        other_kernel_ns,
        idle_ns,
        bubble_ratio
    from {{ ref('int_bubble_parts_swept') }}
)

select * from final
