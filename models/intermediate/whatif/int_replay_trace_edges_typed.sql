{#
    One row per dependency edge of the replay graph between two nodes of one
    trace (edge_type, src_node_id, dst_node_id; nodes of
    int_replay_ops_listed): every kind but `collective`, which crosses
    ranks (int_replay_collective_edges_typed; int_replay_edges_typed is
    both). An edge ties
    a point of its source (src_point: `start` or `end`) to a point of its
    target (dst_point): the target's point cannot come before the source's.

      * step_start: a rank's iteration start -> its first runtime call (on
        a trace without GPU ops, its first compute piece or c10d call); also
        -> any GPU op whose launch the trace lacks (counted: they are gaps
        the replay cannot explain, anchored where they were);
      * cpu_order: a rank's runtime calls (or, without GPU ops, its compute
        pieces and c10d calls) in the order they began, over all
        its threads (PyTorch's main thread blocks in backward while the
        autograd thread launches, as HTA remaps them onto one); end -> start,
        or start -> start where the two overlap (threads running at once);
      * launch: runtime call start -> the kernel, copy or fill it launched
        (correlation / ac2g flow, int_kernels_classified.launch_slice_id,
        carried by int_replay_ops_listed);
      * stream_order: end -> start of consecutive GPU ops on one stream;
      * comm_stream_wait: end of the last non-communication GPU op the rank
        launched before a communication kernel -> that kernel's start:
        c10d's ProcessGroupNCCL makes the NCCL stream wait for the calling
        stream before every collective and P2P (its cudaEventRecord +
        cudaStreamWaitEvent pair), whether or not that wait held it back
        in the measured run;
      * gpu_wait: end of a GPU op on another stream -> start of a GPU op
        that began after every dependency above was met: the latest such
        end among ops launched before it (a cudaStreamWaitEvent, NCCL's
        stream waiting for the compute stream, a blocking collective). Most
        traces carry no Kineto cuda_sync events (none of ../shared/data's
        Kineto traces, nor the simulator's), so these are inferred from
        the measured order, never from which op they name; an op with a
        cuda_event_wait edge gets none;
      * host_sync: end of the last GPU op of the rank that ended inside a
        blocking runtime call (var('replay_host_sync_calls')) and was
        launched before it -> the call's end (the call returns once the
        GPU is done); a call with a cuda_host_sync edge gets none;
      * cuda_event_wait, cuda_host_sync: the waits the profiler recorded
        (Kineto's cuda_sync events, where the trace has them), resolved
        as HTA resolves them (int_cuda_syncs_resolved): the op recorded
        before a cudaStreamWaitEvent's event -> the waiting stream's next
        op; the last op on a synchronised stream (every stream, for a
        device sync) -> the blocking call's end;
    Per trace x iteration (a rank's runtime calls and GPU ops, where the
    old per-rank partitions are per trace: one trace is one rank); each
    edge carries its target's run, iteration, rank and trace, so edges
    count per trace without joining the nodes again. Each kind's rows are
    one call of replay_edges (macros/replay_edges.sql), the one shape of an
    edge row; the CTEs before it say where the kind's source and target
    come from. Every input is the trace's own, on its own clock, so the
    model is per trace (materialized per_trace): keyed by trace_id,
    and an incremental build types only the new traces' edges.
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The traces to compute (macros/per_trace.sql). -#}
{%- set new_traces = trace_filter(traces_pending()) %}

with

{# Times on the trace's own clock: every edge here is between nodes of one
   trace, where a clock offset would add the same to both ends. #}
nodes as (
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
        ts_ns as start_ns,
        end_ns
    from {{ ref('int_replay_ops_listed') }}
    where {{ new_traces }}
),

recorded_syncs as (
    select
        trace_id,
        call_slice_id,
        src_slice_id,
        dst_slice_id
    from {{ ref('int_cuda_syncs_resolved') }}
    where src_slice_id is not null and {{ new_traces }}
),

{# A trace without GPU ops has its thread's work instead (host_compute,
   host_communication: int_replay_host_ops_listed), chained the same way. #}
cpu_nodes as (
    select * from nodes
    where node_kind in ('cpu_call', 'cpu_sync') or node_kind like 'host_%'
),

gpu_nodes as (
    select * from nodes
    where node_kind like 'gpu_%'
),

iteration_starts as (
    select
        node_id,
        trace_id,
        iteration
    from nodes
    where node_kind = 'iteration_start'
),

cpu_sequence as (
    select
        *,
        lag(node_id) over rank_calls as previous_node_id,
        lag(end_ns) over rank_calls as previous_end_ns
    from cpu_nodes
    window rank_calls as (
        partition by trace_id, iteration order by start_ns, slice_id
    )
),

first_calls as (
    select
        iteration_starts.node_id as start_node_id,
        cpu_sequence.node_id,
        cpu_sequence.run_id,
        cpu_sequence.iteration,
        cpu_sequence.rank,
        cpu_sequence.trace_id
    from cpu_sequence
    inner join iteration_starts
        on
            cpu_sequence.trace_id = iteration_starts.trace_id
            and cpu_sequence.iteration = iteration_starts.iteration
    where cpu_sequence.previous_node_id is null
),

step_start_edges as (
    {{ replay_edges('step_start', 'first_calls', 'start_node_id', 'node_id') }}
),

cpu_order_edges as (
    {{ replay_edges(
        'cpu_order', 'cpu_sequence', 'previous_node_id', 'node_id',
        src_point="case when previous_end_ns <= start_ns then 'end' else 'start' end",
        where='previous_node_id is not null',
    ) }}
),

gpu_launched as (
    select
        gpu_nodes.*,
        calls.node_id as launch_node_id,
        calls.start_ns as launch_start_ns
    from gpu_nodes
    left join cpu_nodes as calls
        on
            gpu_nodes.trace_id = calls.trace_id
            and gpu_nodes.launch_slice_id = calls.slice_id
            and gpu_nodes.iteration = calls.iteration
),

launch_edges as (
    {{ replay_edges(
        'launch', 'gpu_launched', 'launch_node_id', 'node_id',
        src_point='start', where='launch_node_id is not null',
    ) }}
),

unlaunched_ops as (
    select
        iteration_starts.node_id as start_node_id,
        gpu_launched.node_id,
        gpu_launched.run_id,
        gpu_launched.iteration,
        gpu_launched.rank,
        gpu_launched.trace_id
    from gpu_launched
    inner join iteration_starts
        on
            gpu_launched.trace_id = iteration_starts.trace_id
            and gpu_launched.iteration = iteration_starts.iteration
    where gpu_launched.launch_node_id is null
),

unlaunched_edges as (
    {{ replay_edges('step_start', 'unlaunched_ops', 'start_node_id', 'node_id') }}
),

stream_sequence as (
    select
        *,
        lag(node_id) over stream_ops as previous_node_id,
        lag(end_ns) over stream_ops as previous_end_ns
    from gpu_launched
    window stream_ops as (
        partition by trace_id, iteration, device, gpu_stream order by start_ns, slice_id
    )
),

stream_order_edges as (
    {{ replay_edges(
        'stream_order', 'stream_sequence', 'previous_node_id', 'node_id',
        where='previous_node_id is not null',
    ) }}
),

{# What the launch and the stream explain: the op may start from then on.
   Only an op that started later than that waited for something else. #}
explained as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        trace_id,
        device,
        gpu_stream,
        start_ns,
        launch_start_ns,
        greatest(
            coalesce(launch_start_ns, start_ns),
            coalesce(previous_end_ns, launch_start_ns, start_ns)
        ) as explained_ns
    from stream_sequence
),

waiting as (
    select * from explained
    where start_ns > explained_ns
),

launch_sequence as (
    select
        node_id,
        node_kind,
        run_id,
        iteration,
        rank,
        trace_id,
        last_value(
            case when node_kind != 'gpu_communication' then node_id end ignore nulls
        ) over (
            partition by trace_id, iteration
            order by launch_start_ns, node_id
            rows between unbounded preceding and 1 preceding
        ) as calling_stream_node_id
    from gpu_launched
    where launch_start_ns is not null
),

comm_stream_wait_edges as (
    {{ replay_edges(
        'comm_stream_wait', 'launch_sequence', 'calling_stream_node_id', 'node_id',
        where="node_kind = 'gpu_communication' and calling_stream_node_id is not null",
    ) }}
),

{# Waits the profiler recorded (cuda_sync events, int_cuda_syncs_resolved),
   between nodes of one iteration: a cross-stream event wait ties the
   recorded op's end to the waiting op's start; a host sync, the op's end
   to the blocking call's end. #}
recorded_waits as (
    select distinct
        src.node_id as src_node_id,
        waiting.node_id as dst_node_id,
        waiting.node_kind like 'gpu_%' as is_event_wait,
        waiting.run_id,
        waiting.iteration,
        waiting.rank,
        waiting.trace_id
    from recorded_syncs
    inner join gpu_nodes as src
        on
            recorded_syncs.trace_id = src.trace_id
            and recorded_syncs.src_slice_id = src.slice_id
    {#- The GPU op that waits (an event wait), else the blocking call. #}
    inner join nodes as waiting
        on
            recorded_syncs.trace_id = waiting.trace_id
            and coalesce(recorded_syncs.dst_slice_id, recorded_syncs.call_slice_id)
            = waiting.slice_id
            and src.iteration = waiting.iteration
    where
        waiting.node_kind like 'gpu_%' and recorded_syncs.dst_slice_id is not null
        or waiting.node_kind = 'cpu_sync' and recorded_syncs.dst_slice_id is null
),

cuda_event_wait_edges as (
    {{ replay_edges(
        'cuda_event_wait', 'recorded_waits', 'src_node_id', 'dst_node_id', where='is_event_wait',
    ) }}
),

cuda_host_sync_edges as (
    {{ replay_edges(
        'cuda_host_sync', 'recorded_waits', 'src_node_id', 'dst_node_id', dst_point='end',
        where='not is_event_wait',
    ) }}
),

gpu_wait_candidates as (
    select
        waiting.node_id as dst_node_id,
        waiting.run_id,
        waiting.iteration,
        waiting.rank,
        waiting.trace_id,
        other.node_id as src_node_id,
        other.end_ns as src_end_ns
    from waiting
    inner join gpu_launched as other
        on
            waiting.trace_id = other.trace_id
            and waiting.iteration = other.iteration
            and waiting.start_ns >= other.end_ns
            and waiting.explained_ns < other.end_ns
    where
        (waiting.device != other.device or waiting.gpu_stream != other.gpu_stream)
        and other.launch_start_ns < waiting.launch_start_ns
),

{# The latest-ending candidate binds: one edge per waiting op; an op whose
   wait the profiler recorded needs no inferred one. #}
gpu_wait_sources as (
    {{ replay_latest_sources(
        'gpu_wait_candidates', 'recorded_waits', 'recorded_waits.is_event_wait',
    ) }}
),

gpu_wait_edges as (
    {{ replay_edges('gpu_wait', 'gpu_wait_sources', 'src_node_id', 'dst_node_id') }}
),

host_sync_candidates as (
    select
        syncs.node_id as dst_node_id,
        syncs.run_id,
        syncs.iteration,
        syncs.rank,
        syncs.trace_id,
        gpu_launched.node_id as src_node_id,
        gpu_launched.end_ns as src_end_ns
    from cpu_nodes as syncs
    inner join gpu_launched
        on
            syncs.trace_id = gpu_launched.trace_id
            and syncs.iteration = gpu_launched.iteration
            and syncs.start_ns > gpu_launched.launch_start_ns
            and syncs.start_ns <= gpu_launched.end_ns
            and syncs.end_ns >= gpu_launched.end_ns
    where syncs.node_kind = 'cpu_sync'
),

host_sync_sources as (
    {{ replay_latest_sources(
        'host_sync_candidates', 'recorded_waits', 'not recorded_waits.is_event_wait',
    ) }}
),

host_sync_edges as (
    {{ replay_edges(
        'host_sync', 'host_sync_sources', 'src_node_id', 'dst_node_id', dst_point='end',
    ) }}
),

final as (
    select * from step_start_edges
    union all
    select * from cpu_order_edges
    union all
    select * from launch_edges
    union all
    select * from unlaunched_edges
    union all
    select * from stream_order_edges
    union all
    select * from comm_stream_wait_edges
    union all
    select * from gpu_wait_edges
    union all
    select * from host_sync_edges
    union all
    select * from cuda_event_wait_edges
    union all
    select * from cuda_host_sync_edges
)

select * from final
