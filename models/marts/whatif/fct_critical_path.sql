{#
    What sets the step? One row per run x iteration x op on the critical
    path: the chain of ops, across ranks, whose replayed times set the
    iteration's last GPU end (int_critical_path_walked: HTA's critical
    path, over every rank and the collectives between them). path_ns is
    the op's time on the path: its delay after the dependency that held
    it (delay_ns), its own work (work_ns), and, where a collective's last
    arrival or the GPU op a host sync waited for ended it, its transfer or
    return after that (wait_ns). share_ratio = path_ns / the path's length
    (a ratio of sums: summed per rank, kind or phase it gives their share).
    Ops with no time on the path (a collective instance) are listed with 0.
#}

with

walked as (
    select
        run_id,
        iteration,
        path_step,
        node_id,
        segment,
        segment_ns
    from {{ ref('int_critical_path_walked') }}
),

nodes as (
    select
        node_id,
        rank,
        node_kind,
        trace_id,
        slice_id,
        collective_id
    from {{ ref('int_replay_nodes_listed') }}
),

kernels as (
    select
        trace_id,
        slice_id,
        name,
        phase
    from {{ ref('int_kernels_classified') }}
),

{# A trace without GPU ops (int_replay_host_ops_listed): a compute
   piece's phase is its step frame's, a c10d call's the innermost step
   frame around it (pp_p2p, dp_sync, forward...). #}
host_frames as (
    select
        trace_id,
        slice_id,
        phase,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where is_outermost
),

host_calls as (
    select
        calls.trace_id,
        calls.slice_id,
        min(calls.name) as call_name,
        arg_max(host_frames.phase, host_frames.ts_ns) as phase
    from {{ ref('int_cpu_collectives_placed') }} as calls
    left join host_frames
        on
            calls.trace_id = host_frames.trace_id
            and calls.ts_ns >= host_frames.ts_ns
            and calls.ts_ns < host_frames.end_ns
    where calls.event_type = 'call'
    group by 1, 2
),

host_ops as (
    select
        trace_id,
        slice_id,
        call_name,
        phase
    from host_calls
    union all
    select
        trace_id,
        slice_id,
        null as call_name,
        phase
    from host_frames
),

ops as (
    select
        run_id,
        iteration,
        node_id,
        min(path_step) as path_order,
        cast(sum(segment_ns) as bigint) as path_ns,
        cast(coalesce(sum(segment_ns) filter (where segment = 'delay'), 0) as bigint)
            as delay_ns,
        cast(coalesce(sum(segment_ns) filter (where segment = 'work'), 0) as bigint) as work_ns,
        cast(coalesce(sum(segment_ns) filter (where segment = 'wait'), 0) as bigint) as wait_ns
    from walked
    group by 1, 2, 3
),

lengths as (
    select
        run_id,
        iteration,
        cast(sum(segment_ns) as bigint) as path_length_ns
    from walked
    group by 1, 2
),

final as (
    select
        ops.run_id,
        ops.iteration,
        ops.node_id,
        ops.path_order,
        nodes.rank,
        nodes.node_kind,
        coalesce(kernels.phase, host_ops.phase, 'host') as phase,
        coalesce(kernels.name, host_ops.call_name) as kernel_name,
        nodes.collective_id,
        ops.path_ns,
        ops.delay_ns,
        ops.work_ns,
        ops.wait_ns,
        lengths.path_length_ns,
        ops.path_ns / nullif(lengths.path_length_ns, 0) as share_ratio
    from ops
    inner join nodes
        on ops.node_id = nodes.node_id
    inner join lengths
        on
            ops.run_id = lengths.run_id
            and ops.iteration = lengths.iteration
    left join kernels
        on
            nodes.trace_id = kernels.trace_id
            and nodes.slice_id = kernels.slice_id
    left join host_ops
        on
            nodes.trace_id = host_ops.trace_id
            and nodes.slice_id = host_ops.slice_id
            and nodes.node_kind like 'host_%'
)

select * from final
