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
    measured times break an edge (a clock offset the alignment missed);
    rank_local_comm_count communication ops that no collective instance
    ties to another rank (their group's op order disagrees across ranks,
    or no peer was found: int_replay_members_paired), replayed with their
    measured time, waits included, as their own work.
    edge_types lists the kinds of dependency edge the replay had into the
    rank's nodes in the iteration, has_recorded_syncs whether any came from
    the waits Kineto recorded (cuda_sync events: cuda_event_wait,
    cuda_host_sync): without them the replay has stream order, launches
    and inferred waits only.
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
        inconsistent_node_count,
        rank_local_comm_count
    from {{ ref('int_replay_steps_replayed') }}
    where scenario = 'as_measured'
),

edges as (
    select
        run_id,
        rank,
        iteration,
        edge_type
    from {{ ref('int_replay_edges_typed') }}
),

edge_kinds as (
    select
        run_id,
        rank,
        iteration,
        {{ string_agg_ordered('edge_type', "','", 'edge_type', distinct=true) }} as edge_types,
        bool_or(edge_type like 'cuda_%') as has_recorded_syncs
    from edges
    group by 1, 2, 3
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
        replays.inconsistent_node_count,
        replays.rank_local_comm_count,
        edge_kinds.edge_types,
        coalesce(edge_kinds.has_recorded_syncs, false) as has_recorded_syncs
    from steps
    inner join replays
        on
            steps.run_id = replays.run_id
            and steps.rank = replays.rank
            and steps.iteration = replays.iteration
    left join edge_kinds
        on
            steps.run_id = edge_kinds.run_id
            and steps.rank = edge_kinds.rank
            and steps.iteration = edge_kinds.iteration
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
        inconsistent_node_count,
        rank_local_comm_count,
        edge_types,
        has_recorded_syncs
    from compared
)

select * from final
