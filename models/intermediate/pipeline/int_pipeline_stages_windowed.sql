{#
    One row per run x pp group x iteration x pipeline stage: the pipeline
    group's window in the iteration and how much of it the stage spent idle
    (ARCHITECTURE.md, "Metric definitions").

    Work of a stage = its forward, backward and recompute work: on GPU
    traces the compute and memory kernels of those phases (communication is
    left out because a collective's time includes waiting for its peers, and
    PP send/recv, DP sync and the optimizer are not microbatch work; the
    simulator's ground truth counts the same), on traces without kernels the
    outermost forward and backward step frames (timing_source = 'cpu'),
    which hold their CPU-side collectives. busy = length of the union of
    that work, merged per trace in int_stage_work_merged. The group window
    runs from the first start to the last end of any stage's work in the
    iteration, so the optimizer and DP sync at the end of the step are
    outside it, as in the theory the ratio is compared with.
    bubble = window - busy.
    theoretical_bubble_ratio = (p - 1) / (v * m + p - 1), p = pp size,
    v = vpp size, m = microbatches per chunk: 1F1B's (p - 1) / (m + p - 1)
    when v = 1.
    Members of the group come from int_ranks_placed (pp_group_index,
    pp_stage; what dim_ranks shows); ranks with no pp group (no topology)
    are left out, and so are groups of one stage (PP = 1): with no
    pipeline, window - busy is the step's idle time (launch gaps, host
    waits), which fct_iteration_summary's idle share already holds, and a
    real TP1 x PP1 Megatron run on one H200 showed it as a 40-50% "bubble". fct_pipeline_bubbles shows these rows;
    int_bubble_parts_swept splits each stage's bubble.
#}

with

{# The stage's work per trace and iteration (int_stage_work_merged: the
   union of its forward, backward and recompute work); a rank's traces
   hold disjoint windows, so summing them gives the union. #}
stage_work as (
    select
        run_id,
        rank,
        iteration,
        timing_source,
        min(stage_start_ns) as stage_start_ns,
        max(stage_end_ns) as stage_end_ns,
        cast(sum(busy_ns) as bigint) as busy_ns,
        cast(sum(work_count) as bigint) as work_count
    from {{ ref('int_stage_work_merged') }}
    group by 1, 2, 3, 4
),

microbatch_steps as (
    select
        run_id,
        rank,
        iteration,
        phase,
        vpp_size,
        chunk_microbatches
    from {{ ref('int_microbatch_steps_chunked') }}
),

ranks as (
    select
        run_id,
        rank,
        pp_group_index,
        pp_stage,
        pp_size
    from {{ ref('int_ranks_placed') }}
    where pp_group_index is not null and pp_size > 1
),

{# m and v of a stage: microbatches per chunk of its forward steps. #}
stage_microbatches as (
    select
        run_id,
        rank,
        iteration,
        max(vpp_size) as vpp_size,
        max(chunk_microbatches) as microbatches
    from microbatch_steps
    where phase = 'forward'
    group by 1, 2, 3
),

stages as (
    select
        stage_work.*,
        ranks.pp_group_index,
        ranks.pp_stage,
        ranks.pp_size,
        min(stage_work.stage_start_ns) over (
            partition by
                stage_work.run_id,
                ranks.pp_group_index,
                stage_work.iteration,
                stage_work.timing_source
        ) as group_start_ns,
        max(stage_work.stage_end_ns) over (
            partition by
                stage_work.run_id,
                ranks.pp_group_index,
                stage_work.iteration,
                stage_work.timing_source
        ) as group_end_ns
    from stage_work
    inner join ranks
        on
            stage_work.run_id = ranks.run_id
            and stage_work.rank = ranks.rank
),

final as (
    select
        stages.run_id,
        stages.pp_group_index,
        stages.iteration,
        stages.pp_stage,
        stages.rank,
        stages.timing_source,
        stages.group_start_ns,
        stages.group_end_ns,
        stages.group_end_ns - stages.group_start_ns as group_span_ns,
        stages.stage_start_ns,
        stages.stage_end_ns,
        stages.work_count,
        stages.busy_ns,
        stages.group_end_ns - stages.group_start_ns - stages.busy_ns as bubble_ns,
        case
            when stages.group_end_ns > stages.group_start_ns
                then
                    cast(stages.group_end_ns - stages.group_start_ns - stages.busy_ns as double)
                    / (stages.group_end_ns - stages.group_start_ns)
        end as bubble_ratio,
        case
            when stage_microbatches.microbatches > 0
                then
                    cast(stages.pp_size - 1 as double)
                    / (
                        coalesce(stage_microbatches.vpp_size, 1) * stage_microbatches.microbatches
                        + stages.pp_size - 1
                    )
        end as theoretical_bubble_ratio,
        stage_microbatches.microbatches,
        coalesce(stage_microbatches.vpp_size, 1) as vpp_size,
        stages.pp_size
    from stages
    left join stage_microbatches
        on
            stages.run_id = stage_microbatches.run_id
            and stages.rank = stage_microbatches.rank
            and stages.iteration = stage_microbatches.iteration
)

select * from final
