{#
    One row per trace x device x stream x idle category (host_wait,
    kernel_wait, other): the gaps between consecutive GPU work on a stream,
    classified as Holistic Trace Analysis' get_idle_time_breakdown does
    (hta/analyzers/breakdown_analysis.py, _analyze_idle_time_for_stream).

    On each stream, work ordered by start: gap = start - end of the work
    before it. The gap is
      host_wait    when the work's CPU launch started after the previous
                   work ended (the host did not enqueue fast enough),
      kernel_wait  else when the gap is shorter than
                   var('idle_kernel_wait_threshold_ns') (launch overhead
                   between back-to-back work),
      other        else (the stream waits on something else: an event, a
                   collective's peer, a dependency on another stream).
    The first work of a stream has no gap. Work counted is HTA's (macro
    hta_counted_work): every kernel, copy and fill of the trace, except, on
    a trace with two ProfilerSteps or more, work launched after the last
    step ends and work whose launch is not in the trace.
    Gaps are taken within a trace (a rank's traces are separate profiling
    windows). Times are rounded as the interval models round them
    (var('kernel_time_unit_ns'); the launch start like a kernel start).
    1000 reproduces HTA's default, which rounds ns-resolution traces inward
    to whole microseconds after reading them as float64 (0.25 us steps at
    today's clocks): the times here are read the same way first (macro
    hta_float_time), the end as start + duration as HTA adds them. With 1
    (ns) the times are the trace's own; HTA with its rounding switched off
    still reads them to 0.25 us, which moves up to a few percent of a
    category on ns-resolution traces (tests/test_models_idle_external.py).
    Differences from HTA on purpose: a negative gap (work overlapping the
    one before it on its stream, which HTA's own rounding can create)
    counts as 0, not as negative kernel_wait; and work whose launch is not
    in the trace (it was queued before profiling began) is never host_wait,
    while HTA compares it with the first event of its data frame (pandas
    joins its "launch not in trace" marker, index 0, to row 0).
    Per trace (materialized per_trace): keyed by trace_id.
#}

with

{# The file's own time base: HTA reads the microseconds the file holds (macro
   hta_float_time). From int_traces_loaded (the lake's `traces` rows as a
   table): through stg_lake__traces every build opened every trace's file. #}
traces as (
    select
        trace_id,
        coalesce(base_time_ns, 0) as base_time_ns
    from {{ ref('int_traces_loaded') }}
),

{% set unit = var('kernel_time_unit_ns') %}
{% set base = 'traces.base_time_ns' %}
kernels as (
    select
        classified.run_id,
        classified.rank,
        classified.trace_id,
        classified.slice_id,
        classified.device,
        classified.stream,
        {{ round_up_to_unit(hta_float_time('classified.ts_ns', base), unit) }} as ts_ns,
        {{ round_down_to_unit(
            hta_float_time(
                '(' ~ hta_float_time('classified.ts_ns', base) ~ ' + classified.dur_ns)', base
            ),
            unit,
        ) }} as end_ns,
        {{ round_up_to_unit(hta_float_time('classified.launch_ts_ns', base), unit) }}
            as launch_ts_ns
    from {{ ref('int_kernels_classified') }} as classified
    inner join traces
        on classified.trace_id = traces.trace_id
    where {{ trace_filter(traces_pending(), 'classified.trace_id') }}
),

counted as (
    {{ hta_counted_work('kernels') }}
),

gaps as (
    select
        *,
        lag(end_ns) over (
            partition by trace_id, device, stream
            order by ts_ns, slice_id
        ) as previous_end_ns
    from counted
),

classified as (
    select
        run_id,
        rank,
        trace_id,
        device,
        stream,
        case
            when launch_ts_ns > previous_end_ns then 'host_wait'
            when
                ts_ns - previous_end_ns < {{ var('idle_kernel_wait_threshold_ns') }}
                then 'kernel_wait'
            else 'other'
        end as idle_category,
        greatest(ts_ns - previous_end_ns, 0) as idle_ns
    from gaps
    where previous_end_ns is not null
),

{# Every stream gets all three categories (0 when none), so charts and
   shares never miss a category. #}
streams as (
    select distinct
        run_id,
        rank,
        trace_id,
        device,
        stream
    from counted
),

categories as (
    select 'host_wait' as idle_category
    union all
    select 'kernel_wait' as idle_category
    union all
    select 'other' as idle_category
),

totals as (
    select
        trace_id,
        device,
        stream,
        idle_category,
        count(*) as gap_count,
        sum(idle_ns) as idle_ns
    from classified
    group by 1, 2, 3, 4
),

final as (
    select
        streams.run_id,
        streams.rank,
        streams.trace_id,
        streams.device,
        streams.stream,
        categories.idle_category,
        coalesce(totals.gap_count, 0) as gap_count,
        coalesce(totals.idle_ns, 0) as idle_ns
    from streams
    cross join categories
    left join totals
        on
            streams.trace_id = totals.trace_id
            and streams.device is not distinct from totals.device
            and streams.stream is not distinct from totals.stream
            and categories.idle_category = totals.idle_category
)

select * from final
