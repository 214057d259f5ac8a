{#
    One row per collective call a rank made (trace_id, slice_id): on GPU
    runs each NCCL kernel (int_kernels_classified, kind communication), on
    traces without communication kernels (gloo, CPU captures) each c10d call
    (int_cpu_collectives_classified, event_type `call`); `device` says which.

    What matching across ranks needs from the call's own trace:
      * op: the seed collective_ops' first pattern matching torch's
        `Collective name` (or the c10d name), else the cpu_op around an older
        PyTorch's launch (`nccl:all_to_all`), else the kernel name;
      * dtype and bytes: elements (the larger of in/out msg nelems, else the
        launch parent's `Input Dims`) x the seed dtype_sizes' size;
      * the group as the trace names it (pg name, description, ranks key)
        or, without process-group args, the kind its call site or step
        frame gives (`group_kind_hint`);
      * seq: the call's order among the rank's calls of that group in its
        iteration (launch order), counting per op when the trace names no
        group, since then only kind, op and order tie calls together;
      * P2P peer: c10d send/recv name their peer's group rank
        (`Concrete Inputs`); peer_index is it, resolved against the group
        by int_collective_members_matched.
    Per trace (materialized per_trace): keyed by trace_id.
#}

{#- The traces to compute, read once for every scan, whose lake files are
    read by name (macros/per_trace.sql, macros/lake_scan.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        collective_name,
        process_group_name,
        process_group_desc,
        process_group_ranks_key,
        phase_group_kind,
        dtype,
        in_msg_nelems,
        out_msg_nelems,
        launch_slice_id,
        launch_ts_ns,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where
        kind = 'communication'
        and {{ new_traces }}
),

cpu_calls as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        collective,
        comm_process_group_kind,
        iteration,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_collectives_classified') }}
    where
        event_type = 'call'
        and {{ new_traces }}
),

ops as (
    select
        pattern_id,
        priority,
        op,
        match_on,
        pattern
    from {{ ref('collective_ops') }}
),

dtype_sizes as (
    select
        dtype,
        size_bytes
    from {{ ref('dtype_sizes') }}
),

{# Older PyTorch gives the kernel no comm args: the cpu_op around its launch does. #}
bare_kernels as (
    select
        trace_id,
        launch_slice_id
    from kernels
    where collective_name is null and launch_slice_id is not null
),

{# A trace's CPU calls count only when it has no communication kernels (else they repeat them). #}
gpu_traces as (
    select distinct trace_id
    from kernels
),

cpu_only_calls as (
    select *
    from cpu_calls
    where trace_id not in (select gpu_traces.trace_id from gpu_traces)
),

{# Only the slices whose args are read: launches and their parents, CPU-only calls. #}
needed_traces as (
    select trace_id from bare_kernels
    union
    select trace_id from cpu_only_calls
),

lake_slices as (
    select
        trace_id,
        slice_id,
        parent_id,
        name,
        args
    from {{ lake_scan('slices', pending) }}
    where
        trace_id in (select needed_traces.trace_id from needed_traces)
        and {{ new_traces }}
),

launch_parents as (
    select
        bare_kernels.trace_id,
        bare_kernels.launch_slice_id,
        parents.name as parent_name,
        {{ json_text('parents.args', 'Input type', [0]) }} as parent_dtype,
        {{ first_input_elements('parents.args') }}
            as parent_nelems
    from bare_kernels
    inner join lake_slices as launches
        on
            bare_kernels.trace_id = launches.trace_id
            and bare_kernels.launch_slice_id = launches.slice_id
    inner join lake_slices as parents
        on
            launches.trace_id = parents.trace_id
            and launches.parent_id = parents.slice_id
),

cpu_call_args as (
    select
        cpu_only_calls.*,
        lake_slices.args
    from cpu_only_calls
    inner join lake_slices
        on
            cpu_only_calls.trace_id = lake_slices.trace_id
            and cpu_only_calls.slice_id = lake_slices.slice_id
),

gpu_rows as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        'gpu' as device,
        kernels.iteration,
        kernels.name,
        kernels.collective_name,
        launch_parents.parent_name,
        kernels.process_group_name,
        kernels.process_group_desc,
        kernels.process_group_ranks_key,
        kernels.phase_group_kind as group_kind_hint,
        lower(coalesce(kernels.dtype, launch_parents.parent_dtype)) as dtype,
        coalesce(
            greatest(kernels.in_msg_nelems, kernels.out_msg_nelems),
            launch_parents.parent_nelems
        ) as nelems,
        cast(null as bigint) as peer_index,
        coalesce(kernels.launch_ts_ns, kernels.ts_ns) as order_ns,
        kernels.ts_ns,
        kernels.end_ns
    from kernels
    left join launch_parents
        on
            kernels.trace_id = launch_parents.trace_id
            and kernels.launch_slice_id = launch_parents.launch_slice_id
),

{# c10d::send(tensors, group, dstRank, tag) / recv_(tensors, group, srcRank, tag). #}
cpu_rows as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        'cpu' as device,
        iteration,
        name,
        collective as collective_name,
        cast(null as string) as parent_name,
        cast(null as string) as process_group_name,
        cast(null as string) as process_group_desc,
        cast(null as string) as process_group_ranks_key,
        comm_process_group_kind as group_kind_hint,
        lower({{ json_text('args', 'Input type', [0]) }}) as dtype,
        {{ first_input_elements('args') }}
            as nelems,
        case
            when collective in ('send', 'recv', 'recv_any_source')
                then try_cast({{ json_text('args', 'Concrete Inputs', [2]) }} as bigint)
        end as peer_index,
        ts_ns as order_ns,
        ts_ns,
        end_ns
    from cpu_call_args
),

calls as (
    select * from gpu_rows
    union all
    select * from cpu_rows
),

{# Patterns are tried on each distinct name triple once, not on every call. #}
call_names as (
    select distinct
        collective_name,
        parent_name,
        name
    from calls
),

op_candidates as (
    select
        call_names.collective_name,
        call_names.parent_name,
        call_names.name,
        ops.op,
        ops.priority,
        ops.pattern_id
    from call_names
    inner join ops
        on
            (
                ops.match_on = 'collective_name'
                and {{ regex_matches('call_names.collective_name', 'ops.pattern') }}
            )
            or (
                ops.match_on = 'launch_parent'
                and {{ regex_matches('call_names.parent_name', 'ops.pattern') }}
            )
            or (
                ops.match_on = 'kernel_name'
                and {{ regex_matches('call_names.name', 'ops.pattern') }}
            )
),

name_ops as (
    {{ first_match(
        'op_candidates',
        ['collective_name', 'parent_name', 'name'],
        ['priority', 'pattern_id'],
    ) }}
),

classified as (
    select
        calls.*,
        coalesce(name_ops.op, 'other') as op,
        calls.process_group_name is not null
        or calls.process_group_desc is not null
        or calls.process_group_ranks_key is not null as has_group_args,
        case
            when calls.peer_index is not null and calls.collective_name like 'send%' then 'send'
            when calls.peer_index is not null then 'recv'
        end as p2p_direction,
        dtype_sizes.size_bytes
    from calls
    left join name_ops
        on
            calls.collective_name is not distinct from name_ops.collective_name
            and calls.parent_name is not distinct from name_ops.parent_name
            and calls.name = name_ops.name
    left join dtype_sizes
        on calls.dtype = dtype_sizes.dtype
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        device,
        iteration,
        name,
        collective_name,
        op,
        op = 'sendrecv' as is_p2p,
        dtype,
        nelems,
        nelems * size_bytes as bytes,
        process_group_name,
        process_group_desc,
        process_group_ranks_key,
        group_kind_hint,
        has_group_args,
        case when has_group_args then '*' else op end as seq_scope,
        peer_index,
        p2p_direction,
        cast(row_number() over (
            partition by
                trace_id,
                iteration,
                process_group_name,
                process_group_desc,
                process_group_ranks_key,
                case when not has_group_args then group_kind_hint end,
                case when has_group_args then '*' else op end,
                peer_index,
                p2p_direction
            order by order_ns, ts_ns, slice_id
        ) as bigint) as seq,
        ts_ns,
        end_ns,
        end_ns - ts_ns as dur_ns
    from classified
)

select * from final
