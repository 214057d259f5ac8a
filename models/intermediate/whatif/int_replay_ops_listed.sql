{#
    One row per node of the replay's dependency graph that belongs to one
    trace (node_id): the runtime calls, GPU ops and iteration starts of a
    rank, on the trace's own clock. int_replay_nodes_listed adds the
    collective instances (int_replay_collectives_listed, across ranks) and
    puts every node on the reference clock; its docstring has the design of
    the what-if chain. `node_kind`:
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
        copy and fill (int_kernels_classified, by its kind: a collective
        or P2P member is a communication kernel);
      * `iteration_start`: one per trace and iteration, the start of its
        first listed runtime call, the only measured time the replay reads;
      * `host_compute`, `host_communication` (and their iteration starts):
        a trace without GPU ops, replayed from its thread's compute pieces
        and c10d calls (int_replay_host_ops_listed).
    node_id is a 63-bit hash of the node's trace, kind, slice and iteration,
    not a row number over every run: a trace's nodes keep their ids when
    other traces come and go, so the model is per trace (materialized per_trace,
    keyed by trace_id) and an incremental build lists only the new
    traces' nodes. The data test on int_replay_nodes_listed and the replay's
    loader (tracehouse.core.replay.graph_from_relations) refuse a collision
    (about 1 in 200,000 at 10 M nodes) rather than merge two nodes.
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The traces to compute, read once for every scan (macros/per_trace.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

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
    where iteration is not null and {{ new_traces }}
),

sync_calls as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        ts_ns,
        end_ns
    from {{ lake_scan('slices', pending) }}
    where
        category = 'cuda_runtime'
        and name in (
            {%- for call in var('replay_host_sync_calls') %}
                '{{ call }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
        and {{ new_traces }}
),

step_windows as (
    select
        trace_id,
        step_number,
        ts_ns,
        window_end_ns
    from {{ ref('int_step_windows_resolved') }}
    where {{ new_traces }}
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
        case when is_sync then 'cpu_sync' else 'cpu_call' end as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        ts_ns,
        end_ns
    from cpu_calls
    union all
    select
        run_id,
        rank,
        iteration,
        trace_id,
        slice_id,
        'gpu_' || kind as node_kind,
        device,
        stream as gpu_stream,
        launch_slice_id,
        ts_ns,
        end_ns
    from kernels
),

iteration_starts as (
    select
        run_id,
        rank,
        iteration,
        trace_id,
        cast(null as bigint) as slice_id,
        'iteration_start' as node_kind,
        cast(null as bigint) as device,
        cast(null as bigint) as gpu_stream,
        cast(null as bigint) as launch_slice_id,
        min(ts_ns) as ts_ns,
        min(ts_ns) as end_ns
    from slice_nodes
    where node_kind in ('cpu_call', 'cpu_sync')
    group by 1, 2, 3, 4
),

all_nodes as (
    select * from slice_nodes
    union all
    select * from iteration_starts
),

{# A trace without GPU ops: its thread's compute and c10d calls. #}
host_nodes as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        device,
        gpu_stream,
        launch_slice_id,
        ts_ns,
        end_ns
    from {{ ref('int_replay_host_ops_listed') }}
    where {{ new_traces }}
),

listed as (
    select
        {{ replay_node_id('trace_id', 'node_kind', 'slice_id', 'iteration') }} as node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        device,
        gpu_stream,
        launch_slice_id,
        ts_ns,
        end_ns
    from all_nodes
),

final as (
    select * from listed
    union all
    select * from host_nodes
)

select * from final
