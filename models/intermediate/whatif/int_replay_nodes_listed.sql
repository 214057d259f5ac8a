{#
    One row per node of the dependency graph the replay walks (node_id), on
    the reference clock (int_rank_clock_offsets added). Design of the
    what-if chain (issue 33), read top to bottom:

    Nodes, per run x rank x iteration (`node_kind`):
      * `cpu_call`: every CUDA runtime call of the rank (launches, event
        records, stream waits); `cpu_sync`: the runtime calls that block
        the host until the GPU is done (var('replay_host_sync_calls'));
      * `gpu_compute`, `gpu_memory`, `gpu_communication`: every kernel,
        copy and fill (int_kernels_classified), a collective member being
        a `gpu_communication` node;
      * `collective`: one per matched collective or P2P instance
        (int_collective_members_aligned), the moment its last member
        arrives; `iteration_start`: one per rank and iteration, the start
        of its first runtime call, the only measured time the replay reads.
    Edges (int_replay_edges_typed, typed and counted per trace):
    cpu_order, launch, stream_order, gpu_wait, host_sync, collective
    (member start -> instance -> every member's end, P2P send/recv being
    two-member instances), step_start.
    Weights (int_replay_nodes_weighted): a node starts `start_delay_ns`
    after the latest of its start dependencies and ends `work_ns` after
    its start or `own_ns` after the latest of its end dependencies (a
    collective member: its own transfer after the last arrival, the rule
    of the straggler what-if paper); these come from measured times once,
    before the replay.
    The replay (int_replay_ops_replayed, a dbt Python model) recomputes
    every start and end from those weights and edges alone: it never reads
    a dependent op's measured start, so lengthening one kernel moves
    exactly what depends on it. Set-based steps (listing, matching,
    weights) are SQL; the longest-path walk is NumPy inside the Python
    model (a frontier sweep in topological order), which measured faster
    than a recursive CTE (see that model).
    A table rebuilt each time.
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
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where iteration is not null
),

runtime_calls as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        ts_ns,
        end_ns
    from {{ ref('stg_lake__slices') }}
    where category = 'cuda_runtime'
),

step_windows as (
    select
        trace_id,
        step_number,
        ts_ns,
        window_end_ns
    from {{ ref('int_step_windows') }}
),

offsets as (
    select
        run_id,
        rank,
        offset_ns
    from {{ ref('int_rank_clock_offsets') }}
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

calls_placed as (
    select
        runtime_calls.*,
        coalesce(step_windows.step_number, trace_iterations.iteration) as iteration
    from runtime_calls
    left join step_windows
        on
            runtime_calls.trace_id = step_windows.trace_id
            and runtime_calls.ts_ns >= step_windows.ts_ns
            and runtime_calls.ts_ns < step_windows.window_end_ns
    left join trace_iterations
        on runtime_calls.trace_id = trace_iterations.trace_id
),

slice_nodes as (
    select
        run_id,
        rank,
        iteration,
        trace_id,
        slice_id,
        cast(null as varchar) as collective_id,
        case
            when name in (
                {%- for call in var('replay_host_sync_calls') %}
                    '{{ call }}'{{ "," if not loop.last }}
                {%- endfor %}
            ) then 'cpu_sync'
            else 'cpu_call'
        end as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        ts_ns,
        end_ns
    from calls_placed
    where iteration is not null
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
        start_ns,
        start_ns as end_ns
    from collectives
),

final as (
    select
        row_number() over (
            order by run_id, iteration, trace_id, slice_id, collective_id, node_kind
        ) as node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        collective_id,
        device,
        gpu_stream,
        start_ns,
        end_ns
    from all_nodes
)

select * from final
