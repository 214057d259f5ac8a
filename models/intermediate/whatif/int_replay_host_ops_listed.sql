{#
    One row per node of the replay graph of a trace without GPU ops
    (node_id): a CPU-only capture (gloo, the shared megatron_cpu runs) has
    no runtime calls or kernels for int_replay_ops_listed to list, so its
    rank's thread is replayed from what it does instead, in thread order:
      * `host_communication`: each c10d call (int_cpu_collectives_placed,
        event_type `call`), the member int_collective_members_matched
        ties across ranks (same trace_id and slice_id). A P2P call's
        transfer completes in its gloo wait (`gloo:send` / `gloo:recv`,
        the k-th wait of that direction after the k-th call on the
        trace), which overlaps the calls after it, so the node spans the
        call's start to the later of its own and its wait's end: the
        replay ends it after the last arrival plus its transfer;
      * `host_compute`: the outermost forward, backward and optimizer
        frames (int_cpu_steps_classified), cut around the communication
        nodes that start inside them (a TP all-reduce inside a forward):
        one node per piece between them (slice_id the frame's; the
        piece's number is in node_id);
      * `iteration_start`: the iteration's step window start
        (int_step_windows_resolved), the only measured time the replay
        reads.
    What lies between (host work outside the frames, Python between
    calls) is no node: int_replay_trace_edges_typed's cpu_order chains the
    nodes and the replay keeps each gap as the next node's start delay
    (what no_host_gaps removes). GPU traces have none of these rows, so
    their graphs are as before. A view: int_replay_ops_listed (per trace,
    incremental) stores them with its own.
#}

{{ config(materialized='view') }}

with

gpu_traces as (
    select distinct trace_id
    from {{ ref('int_kernels_classified') }}
),

comm_events as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        collective,
        event_type,
        ts_ns,
        end_ns,
        row_number() over (
            partition by trace_id, collective, event_type order by ts_ns, slice_id
        ) as event_number
    from {{ ref('int_cpu_collectives_placed') }}
    where
        iteration is not null
        and trace_id not in (select gpu_traces.trace_id from gpu_traces)
),

comm_nodes as (
    select
        calls.run_id,
        calls.rank,
        calls.trace_id,
        calls.slice_id,
        calls.iteration,
        calls.ts_ns,
        greatest(calls.end_ns, coalesce(waits.end_ns, calls.end_ns)) as end_ns
    from comm_events as calls
    left join comm_events as waits
        on
            calls.trace_id = waits.trace_id
            and calls.collective = waits.collective
            and calls.event_number = waits.event_number
            and waits.event_type = 'wait'
    where calls.event_type = 'call'
),

frames as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where
        is_outermost
        and phase in ('forward', 'backward', 'optimizer')
        and iteration is not null
        and trace_id not in (select gpu_traces.trace_id from gpu_traces)
),

{# The communication nodes that start inside each frame, and where the
   compute before each resumes (after every earlier one has ended). #}
cuts as (
    select
        frames.run_id,
        frames.rank,
        frames.trace_id,
        frames.slice_id,
        frames.iteration,
        comm_nodes.ts_ns as cut_start_ns,
        least(comm_nodes.end_ns, frames.end_ns) as cut_end_ns,
        coalesce(
            max(least(comm_nodes.end_ns, frames.end_ns)) over earlier,
            frames.ts_ns
        ) as resume_ns,
        row_number() over frame_cuts as piece
    from frames
    inner join comm_nodes
        on
            frames.trace_id = comm_nodes.trace_id
            and frames.ts_ns <= comm_nodes.ts_ns
            and frames.end_ns > comm_nodes.ts_ns
    window
        frame_cuts as (
            partition by frames.trace_id, frames.slice_id
            order by comm_nodes.ts_ns, comm_nodes.slice_id
        ),
        earlier as (
            partition by frames.trace_id, frames.slice_id
            order by comm_nodes.ts_ns, comm_nodes.slice_id
            rows between unbounded preceding and 1 preceding
        )
),

last_cuts as (
    select
        trace_id,
        slice_id,
        max(cut_end_ns) as resume_ns,
        count(*) as cut_count
    from cuts
    group by 1, 2
),

pieces as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        piece,
        resume_ns as ts_ns,
        cut_start_ns as end_ns
    from cuts
    union all
    select
        frames.run_id,
        frames.rank,
        frames.trace_id,
        frames.slice_id,
        frames.iteration,
        coalesce(last_cuts.cut_count, 0) + 1 as piece,
        coalesce(last_cuts.resume_ns, frames.ts_ns) as ts_ns,
        frames.end_ns
    from frames
    left join last_cuts
        on
            frames.trace_id = last_cuts.trace_id
            and frames.slice_id = last_cuts.slice_id
),

step_windows as (
    select
        trace_id,
        step_number,
        ts_ns
    from {{ ref('int_step_windows_resolved') }}
),

work_nodes as (
    select
        run_id,
        rank,
        iteration,
        'host_compute' as node_kind,
        trace_id,
        slice_id,
        piece,
        ts_ns,
        end_ns
    from pieces
    where end_ns > ts_ns
    union all
    select
        run_id,
        rank,
        iteration,
        'host_communication' as node_kind,
        trace_id,
        slice_id,
        0 as piece,
        ts_ns,
        end_ns
    from comm_nodes
),

iteration_starts as (
    select
        work_nodes.run_id,
        work_nodes.rank,
        work_nodes.iteration,
        'iteration_start' as node_kind,
        work_nodes.trace_id,
        cast(null as bigint) as slice_id,
        0 as piece,
        least(min(step_windows.ts_ns), min(work_nodes.ts_ns)) as ts_ns,
        least(min(step_windows.ts_ns), min(work_nodes.ts_ns)) as end_ns
    from work_nodes
    left join step_windows
        on
            work_nodes.trace_id = step_windows.trace_id
            and work_nodes.iteration = step_windows.step_number
    group by 1, 2, 3, 4, 5
),

all_nodes as (
    select * from work_nodes
    union all
    select * from iteration_starts
),

final as (
    select
        {{ replay_node_id('trace_id', 'node_kind', 'slice_id', 'iteration', 'piece') }} as node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        ts_ns,
        end_ns
    from all_nodes
)

select * from final
