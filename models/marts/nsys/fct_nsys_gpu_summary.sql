{#
    One row per GPU of an Nsight Systems trace (run_id, rank): nsys-ai's
    `summary` figures over fct_nsys_kernels.
    span_ns = last kernel end - first kernel start; compute_ns = the SUM of
    kernel durations (concurrent kernels count twice, so
    utilization_ratio = compute_ns / span_ns can exceed 1, as nsys-ai's
    util%); busy_ns = length of the union of kernels; idle_ns = span_ns -
    busy_ns (the gaps where no kernel runs).
#}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        device,
        stream,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('fct_nsys_kernels') }}
),

islands as (
    {{ merge_intervals('kernels', ['run_id', 'rank'], 'ts_ns', 'end_ns') }}
),

busy as (
    select
        run_id,
        rank,
        cast(sum(busy_ns) as bigint) as busy_ns
    from islands
    group by 1, 2
),

totals as (
    select
        run_id,
        rank,
        any_value(trace_id) as trace_id,
        min(device) as device,
        count(*) as kernel_count,
        count(distinct stream) as stream_count,
        min(ts_ns) as first_start_ns,
        max(end_ns) as last_end_ns,
        max(end_ns) - min(ts_ns) as span_ns,
        cast(sum(dur_ns) as bigint) as compute_ns
    from kernels
    group by 1, 2
),

final as (
    select
        totals.run_id,
        totals.rank,
        totals.trace_id,
        totals.device,
        totals.kernel_count,
        totals.stream_count,
        totals.first_start_ns,
        totals.last_end_ns,
        totals.span_ns,
        totals.compute_ns,
        busy.busy_ns,
        totals.span_ns - busy.busy_ns as idle_ns,
        case
            when totals.span_ns > 0 then cast(totals.compute_ns as double) / totals.span_ns
        end as utilization_ratio
    from totals
    inner join busy
        on
            totals.run_id = busy.run_id
            and totals.rank = busy.rank
)

select * from final
