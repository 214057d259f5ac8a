{#
    How closely does the dependency replay match? One row per run x rank x
    iteration: the measured step (int_rank_steps_timed, the one step
    definition) beside the replayed one, the span of the rank's GPU work in
    the iteration as int_replay_ops_replayed recomputes it from durations
    and dependency edges alone (int_replay_edges_typed). The replay
    recomputes the rank's GPU span (first GPU op start to last end); where
    the step window closes later (at the next step's first kernel: a
    trace with several ProfilerSteps), that tail (`window_tail_ns` =
    measured step - measured span) is kept as measured, so replayed_step_ns
    = replayed span + window_tail_ns, on the step's one definition.
    error_ratio = |replayed - measured| / measured. What the replay does not
    explain is counted, not hidden: start_delay_ns sums, over the rank's GPU
    ops, the time between their dependencies being met and their start
    (launch latency, and any wait the graph has no edge for);
    unlaunched_op_count ops without a launch in the trace (anchored at the
    iteration start); inconsistent_node_count nodes whose measured times
    break an edge (a clock offset the alignment missed).
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

nodes as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        start_ns,
        end_ns,
        start_delay_ns,
        is_inconsistent
    from {{ ref('int_replay_nodes_weighted') }}
),

replayed as (
    select
        node_id,
        replayed_start_ns,
        replayed_end_ns
    from {{ ref('int_replay_ops_replayed') }}
),

edges as (
    select
        edge_type,
        run_id,
        rank,
        iteration
    from {{ ref('int_replay_edges_typed') }}
),

rank_replays as (
    select
        nodes.run_id,
        nodes.rank,
        nodes.iteration,
        count(*) filter (where nodes.node_kind like 'gpu_%') as gpu_op_count,
        max(nodes.end_ns) filter (where nodes.node_kind like 'gpu_%')
        - min(nodes.start_ns) filter (where nodes.node_kind like 'gpu_%')
            as measured_span_ns,
        max(replayed.replayed_end_ns) filter (where nodes.node_kind like 'gpu_%')
        - min(replayed.replayed_start_ns) filter (where nodes.node_kind like 'gpu_%')
            as replayed_span_ns,
        coalesce(
            sum(nodes.start_delay_ns) filter (where nodes.node_kind like 'gpu_%'), 0
        ) as start_delay_ns,
        count(*) filter (where nodes.is_inconsistent) as inconsistent_node_count
    from nodes
    inner join replayed
        on nodes.node_id = replayed.node_id
    where nodes.rank is not null
    group by 1, 2, 3
),

unlaunched as (
    {#- Every rank-iteration has one step_start edge, into its first runtime call. #}
    select
        run_id,
        rank,
        iteration,
        count(*) - 1 as unlaunched_op_count
    from edges
    where edge_type = 'step_start'
    group by 1, 2, 3
),

compared as (
    select
        steps.run_id,
        steps.rank,
        steps.iteration,
        steps.step_rule,
        steps.step_ns as measured_step_ns,
        rank_replays.measured_span_ns,
        rank_replays.replayed_span_ns,
        steps.step_ns - rank_replays.measured_span_ns as window_tail_ns,
        rank_replays.gpu_op_count,
        rank_replays.start_delay_ns,
        coalesce(unlaunched.unlaunched_op_count, 0) as unlaunched_op_count,
        rank_replays.inconsistent_node_count
    from steps
    inner join rank_replays
        on
            steps.run_id = rank_replays.run_id
            and steps.rank = rank_replays.rank
            and steps.iteration = rank_replays.iteration
    left join unlaunched
        on
            steps.run_id = unlaunched.run_id
            and steps.rank = unlaunched.rank
            and steps.iteration = unlaunched.iteration
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
