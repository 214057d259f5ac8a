{#
    One row per node of the dependency graph the replay walks (node_id), on
    the reference clock (int_rank_clock_offsets_estimated added). Design of the
    what-if chain (issue 33), read top to bottom:

    Nodes, per run x rank x iteration (`node_kind`):
      * `cpu_call`: every runtime call that launched a GPU op (the kernel's
        launch_slice_id in int_kernels_classified: its times come with the
        kernel, so the lake's runtime calls are not scanned for them);
        `cpu_sync`: the runtime calls that block the host until the GPU is
        done (var('replay_host_sync_calls')), launching or not. Runtime
        calls that neither launch nor block (cudaEventRecord,
        cudaStreamWaitEvent: 22% of the nodes of a simulated run) are left
        out: nothing but the host's call order depends on them, and the
        next call's start delay takes in their time (a shorter graph, the
        same replay);
      * `gpu_compute`, `gpu_memory`, `gpu_communication`: every kernel,
        copy and fill (int_kernels_classified), a collective member being
        a `gpu_communication` node;
      * `collective`: one per matched collective or P2P instance
        (int_collective_members_aligned), the moment its last member
        arrives; `iteration_start`: one per rank and iteration, the start
        of its first listed runtime call, the only measured time the
        replay reads.
    Edges (int_replay_edges_typed, typed and counted per trace):
    cpu_order, launch, stream_order, gpu_wait, host_sync, collective
    (member start -> instance -> every member's end, P2P send/recv being
    two-member instances), step_start.
    Weights (tracehouse.core.replay.weigh, inside the replay models): a
    node starts `start_delay_ns` after the latest of its start
    dependencies and ends `work_ns` after its start or `own_ns` after the
    latest of its end dependencies (a collective member: its own transfer
    after the last arrival, the rule of the straggler what-if paper); they
    come from measured times once, before the replay.
    The replay (int_replay_steps_replayed, int_critical_path_walked: dbt
    Python models) recomputes every start and end from those weights and
    edges alone: it never reads a dependent op's measured start, so
    lengthening one kernel moves exactly what depends on it. Set-based
    steps (listing, matching, edges) are SQL; weights and the longest-path
    walk are NumPy (a frontier sweep in topological order), which measured
    faster than a recursive CTE (tracehouse/core/replay.py).
    A table rebuilt each time: the graph crosses ranks (collectives), so
    it is not per trace.
#}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        kind,
        device,
        stream,
        iteration,
        launch_slice_id,
        launch_name,
        launch_ts_ns,
        launch_end_ns,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where iteration is not null
),

sync_calls as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        ts_ns,
        end_ns
    from {{ ref('stg_lake__slices') }}
    where
        category = 'cuda_runtime'
        and name in (
            {%- for call in var('replay_host_sync_calls') %}
                '{{ call }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
),

step_windows as (
    select
        trace_id,
        step_number,
        ts_ns,
        window_end_ns
    from {{ ref('int_step_windows_resolved') }}
),

offsets as (
    select
        run_id,
        rank,
        offset_ns
    from {{ ref('int_rank_clock_offsets_estimated') }}
),

members as (
    select
        run_id,
        collective_id,
        trace_id,
        slice_id,
        iteration,
        rank
    from {{ ref('int_collective_members_aligned') }}
),

{# A trace without step windows is one iteration: the one its kernels got. #}
trace_iterations as (
    select
        trace_id,
        min(iteration) as iteration
    from kernels
    where trace_id not in (select step_windows.trace_id from step_windows)
    group by 1
),

{# A launch call belongs to the iteration of the op it launched. #}
launch_calls as (
    select
        run_id,
        rank,
        trace_id,
        launch_slice_id as slice_id,
        min(iteration) as iteration,
        bool_or(launch_name in (
            {%- for call in var('replay_host_sync_calls') %}
                '{{ call }}'{{ "," if not loop.last }}
            {%- endfor %}
        )) as is_sync,
        min(launch_ts_ns) as ts_ns,
        max(launch_end_ns) as end_ns
    from kernels
    where launch_slice_id is not null
    group by 1, 2, 3, 4
),

syncs_placed as (
    select
        sync_calls.run_id,
        sync_calls.rank,
        sync_calls.trace_id,
        sync_calls.slice_id,
        coalesce(step_windows.step_number, trace_iterations.iteration) as iteration,
        true as is_sync,
        sync_calls.ts_ns,
        sync_calls.end_ns
    from sync_calls
    left join step_windows
        on
            sync_calls.trace_id = step_windows.trace_id
            and sync_calls.ts_ns >= step_windows.ts_ns
            and sync_calls.ts_ns < step_windows.window_end_ns
    left join trace_iterations
        on sync_calls.trace_id = trace_iterations.trace_id
    {#- A blocking call that also launched (cudaMemcpy) is a launch call. #}
    left join launch_calls
        on
            sync_calls.trace_id = launch_calls.trace_id
            and sync_calls.slice_id = launch_calls.slice_id
    where launch_calls.slice_id is null
),

cpu_calls as (
    select * from launch_calls
    union all
    select * from syncs_placed
    where iteration is not null
),

slice_nodes as (
    select
        run_id,
        rank,
        iteration,
        trace_id,
        slice_id,
        cast(null as varchar) as collective_id,
        case when is_sync then 'cpu_sync' else 'cpu_call' end as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        ts_ns,
        end_ns
    from cpu_calls
    union all
    select
        kernels.run_id,
        kernels.rank,
        kernels.iteration,
        kernels.trace_id,
        kernels.slice_id,
        cast(null as varchar) as collective_id,
        case
            when members.slice_id is not null then 'gpu_communication'
            else 'gpu_' || kernels.kind
        end as node_kind,
        kernels.device,
        kernels.stream as gpu_stream,
        kernels.launch_slice_id,
        kernels.ts_ns,
        kernels.end_ns
    from kernels
    left join members
        on
            kernels.trace_id = members.trace_id
            and kernels.slice_id = members.slice_id
),

slice_nodes_aligned as (
    select
        slice_nodes.* exclude (ts_ns, end_ns),  -- noqa: RF02
        slice_nodes.ts_ns + coalesce(offsets.offset_ns, 0) as start_ns,
        slice_nodes.end_ns + coalesce(offsets.offset_ns, 0) as end_ns
    from slice_nodes
    left join offsets
        on
            slice_nodes.run_id = offsets.run_id
            and slice_nodes.rank = offsets.rank
),

iteration_starts as (
    select
        run_id,
        rank,
        iteration,
        min(trace_id) as trace_id,
        min(start_ns) as start_ns
    from slice_nodes_aligned
    where node_kind in ('cpu_call', 'cpu_sync')
    group by 1, 2, 3
),

{# The instance's time is computed by the replay; its measured one, the
   last member's arrival, only weighs its members' transfers. #}
collectives as (
    select
        members.run_id,
        members.collective_id,
        min(members.iteration) as iteration,
        max(nodes.start_ns) as start_ns
    from members
    inner join slice_nodes_aligned as nodes
        on
            members.trace_id = nodes.trace_id
            and members.slice_id = nodes.slice_id
    group by 1, 2
),

all_nodes as (
    select * from slice_nodes_aligned
    union all
    select
        run_id,
        rank,
        iteration,
        trace_id,
        cast(null as bigint) as slice_id,
        cast(null as varchar) as collective_id,
        'iteration_start' as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        start_ns,
        start_ns as end_ns
    from iteration_starts
    union all
    select
        run_id,
        cast(null as bigint) as rank,
        iteration,
        cast(null as varchar) as trace_id,
        cast(null as bigint) as slice_id,
        collective_id,
        'collective' as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        start_ns,
        start_ns as end_ns
    from collectives
),

{# node_id numbers the rows in no particular order: sorting 2 M rows by
   their string keys first cost more than the rest of this model at 256
   ranks, and nothing reads an order from the ids. #}
final as (
    select
        row_number() over () as node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        collective_id,
        device,
        gpu_stream,
        launch_slice_id,
        start_ns,
        end_ns
    from all_nodes
)

select * from final
