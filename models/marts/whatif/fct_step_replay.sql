{#
    How closely does the dependency replay match? One row per run x rank x
    iteration: the measured step (int_rank_steps_timed, the one step
    definition) beside the replayed one, the span of the rank's GPU work in
    the iteration as int_replay_steps_replayed recomputes it (scenario
    `as_measured`) from durations and dependency edges alone
    (int_replay_edges_typed). The replay recomputes the rank's GPU span
    (first GPU op start to last end); where the step window closes later
    (at the next step's first kernel: a trace with several ProfilerSteps),
    that tail (`window_tail_ns` = measured step - measured span) is kept as
    measured, so replayed_step_ns = replayed span + window_tail_ns, on the
    step's one definition. error_ratio = |replayed - measured| / measured.
    What the replay does not explain is counted, not hidden: start_delay_ns
    sums, over the rank's GPU ops, the time between their dependencies
    being met and their start (launch latency, and any wait the graph has
    no edge for); unlaunched_op_count ops without a launch in the trace
    (anchored at the iteration start); inconsistent_node_count nodes whose
    measured times break an edge (a clock offset the alignment missed).
#}

with

steps as (
    select
        run_id,
        rank,
        iteration,
        step_rule,
        step_ns
    from {{ ref('int_rank_steps_timed') }}
),

replays as (
    select
        run_id,
        rank,
        iteration,
        gpu_op_count,
        measured_span_ns,
        replayed_span_ns,
        start_delay_ns,
        unlaunched_op_count,
        inconsistent_node_count
    from {{ ref('int_replay_steps_replayed') }}
    where scenario = 'as_measured'
),

compared as (
    select
        steps.run_id,
        steps.rank,
        steps.iteration,
        steps.step_rule,
        steps.step_ns as measured_step_ns,
        replays.measured_span_ns,
        replays.replayed_span_ns,
        steps.step_ns - replays.measured_span_ns as window_tail_ns,
        replays.gpu_op_count,
        replays.start_delay_ns,
        replays.unlaunched_op_count,
        replays.inconsistent_node_count
    from steps
    inner join replays
        on
            steps.run_id = replays.run_id
            and steps.rank = replays.rank
            and steps.iteration = replays.iteration
),

final as (
    select
        run_id,
        rank,
        iteration,
        step_rule,
        measured_step_ns,
        replayed_span_ns + window_tail_ns as replayed_step_ns,
        replayed_span_ns + window_tail_ns - measured_step_ns as error_ns,
        abs(replayed_span_ns + window_tail_ns - measured_step_ns)
        / nullif(measured_step_ns, 0) as error_ratio,
        measured_span_ns,
        replayed_span_ns,
        window_tail_ns,
        gpu_op_count,
        start_delay_ns,
        unlaunched_op_count,
        inconsistent_node_count
    from compared
)

select * from final
