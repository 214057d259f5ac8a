{#
    What would each fix save? One row per run x iteration x scenario: the
    measured step (the slowest rank's, as fct_iteration_summary) beside the
    step the replay predicts with the scenario's durations
    (int_replay_steps_replayed: each rank's replayed GPU span plus its step
    window's measured tail, fct_step_replay's rule; the slowest rank's),
    and the time saved. Scenarios: int_whatif_work_scaled.
#}

with

replays as (
    select
        run_id,
        rank,
        iteration,
        measured_step_ns,
        window_tail_ns
    from {{ ref('fct_step_replay') }}
),

scenarios as (
    select
        scenario,
        run_id,
        rank,
        iteration,
        replayed_span_ns
    from {{ ref('int_replay_steps_replayed') }}
    where scenario != 'as_measured'
),

iterations as (
    select
        scenarios.run_id,
        scenarios.iteration,
        scenarios.scenario,
        max(replays.measured_step_ns) as step_ns,
        max(scenarios.replayed_span_ns + replays.window_tail_ns) as predicted_step_ns
    from scenarios
    inner join replays
        on
            scenarios.run_id = replays.run_id
            and scenarios.rank = replays.rank
            and scenarios.iteration = replays.iteration
    group by 1, 2, 3
),

final as (
    select
        run_id,
        iteration,
        scenario,
        step_ns,
        predicted_step_ns,
        step_ns - predicted_step_ns as saved_ns,
        (step_ns - predicted_step_ns) / nullif(step_ns, 0) as saved_ratio
    from iterations
)

select * from final
