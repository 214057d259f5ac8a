{#
    One row per CUDA kernel of an Nsight Systems trace (trace_id, slice_id),
    inside the capture window var('nsys_window_start_ns') ..
    var('nsys_window_end_ns') when set (macro in_nsys_capture_window:
    capture-clock ns, as nsys shows them; a kernel counts only when it lies
    wholly inside, as nsys-ai's --trim).
    Copies and fills are left out: nsys-ai's views count kernels only.

    `nsys_class` is `communication` for the kernels int_kernels_classified
    (fct_kernels' kind) classifies as communication (the seed
    kernel_kind_patterns: NCCL and the like), else `compute`; `nccl_op` is
    the first seeds/nsys_nccl_ops.csv pattern (by priority) the short name
    matches, `other` when none does. fct_nsys_kernels shows these rows;
    int_nsys_iterations_detected and the other Nsight marts read them.
#}

{#- The Nsight traces, read once: the lake scan reads only their files, and
    none at all on a warehouse of Kineto traces (macros/per_trace.sql,
    macros/lake_scan.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with

traces as (
    select
        trace_id,
        base_time_ns
    from {{ ref('int_traces') }}
    where file_format = '{{ var("nsys_file_format") }}'
),

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        name,
        kind,
        device,
        stream,
        correlation,
        launch_slice_id,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where
        category = 'kernel'
        and {{ trace_filter(nsys_traces) }}
),

slices as (
    select
        trace_id,
        slice_id,
        args
    from {{ lake_scan('slices', nsys_traces) }}
    where
        category = 'kernel'
        -- Nsight traces only, named in the scan: the join below would not
        -- stop the lake's Kineto kernels' args from being read.
        and {{ trace_filter(nsys_traces) }}
),

nccl_ops as (
    select
        priority,
        op,
        pattern
    from {{ ref('nsys_nccl_ops') }}
),

windowed as (
    select
        kernels.*,
        traces.base_time_ns,
        kernels.ts_ns - traces.base_time_ns as capture_ts_ns,
        kernels.end_ns - traces.base_time_ns as capture_end_ns,
        coalesce(
            {{ json_text('slices.args', 'short name') }}, kernels.name
        ) as short_name,
        case
            when kernels.kind = 'communication' then 'communication' else 'compute'
        end as nsys_class
    from kernels
    inner join traces
        on kernels.trace_id = traces.trace_id
    left join slices
        on
            kernels.trace_id = slices.trace_id
            and kernels.slice_id = slices.slice_id
    where
        {{ in_nsys_capture_window('kernels.ts_ns', 'kernels.end_ns', 'traces.base_time_ns') }}
),

op_matches as (
    select
        windowed.trace_id,
        windowed.slice_id,
        min_by(nccl_ops.op, nccl_ops.priority) as nccl_op
    from windowed
    inner join nccl_ops
        on {{ regex_matches('windowed.short_name', 'nccl_ops.pattern') }}
    where windowed.nsys_class = 'communication'
    group by 1, 2
),

final as (
    select
        windowed.run_id,
        windowed.rank,
        windowed.trace_id,
        windowed.slice_id,
        windowed.device,
        windowed.stream,
        windowed.name,
        windowed.short_name,
        windowed.nsys_class,
        case
            when windowed.nsys_class = 'communication'
                then coalesce(op_matches.nccl_op, 'other')
        end as nccl_op,
        windowed.correlation,
        windowed.launch_slice_id,
        windowed.ts_ns,
        windowed.dur_ns,
        windowed.end_ns,
        windowed.capture_ts_ns,
        windowed.capture_end_ns,
        windowed.base_time_ns
    from windowed
    left join op_matches
        on
            windowed.trace_id = op_matches.trace_id
            and windowed.slice_id = op_matches.slice_id
)

select * from final
