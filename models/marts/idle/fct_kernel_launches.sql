{#
    One row per run x rank x GPU kernel, copy or fill launched by a CUDA
    runtime call named in var('kernel_launch_runtime_names')
    (cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync,
    cudaMemsetAsync): the launch statistics of Holistic Trace Analysis'
    get_cuda_kernel_launch_stats (hta/analyzers/cuda_kernel_analysis.py).
    cpu_duration_ns = the runtime call's duration, gpu_duration_ns = the
    kernel's, launch_delay_ns = kernel start - runtime call end, clipped at
    0. The launch is the one ingest found (ingest/slice_context.py: the ac2g
    flow, else the CPU slice with the same correlation id), as
    int_slices_contextualized carries it. Work counted is HTA's (macro
    hta_counted_work): on a trace with two ProfilerSteps or more, work
    launched after the last step ends is left out.
    The flags are HTA's findings: a kernel shorter than its launch, the
    launch no runtime outlier (is_short_kernel: HTA's short kernels are
    those of its runtime_cutoff histogram, cpu_duration <= cut-off), a
    runtime call longer than var('launch_runtime_outlier_ns'), a delay
    longer than var('launch_delay_outlier_ns').
    Times are rounded as int_stream_idle_categorized rounds them
    (var('kernel_time_unit_ns'), 1000 for HTA's default whole microseconds:
    starts up, ends down, after reading them as HTA's float64 does), so a
    call or kernel shorter than the unit can last -1 unit there, as in HTA.
    A view on DuckDB, a table elsewhere (macro lookup_join_materialization).
#}

{{ config(materialized=lookup_join_materialization()) }}

with

{# The file's own time base: HTA reads the microseconds the file holds (macro hta_float_time). #}
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
        classified.iteration,
        classified.name,
        classified.category,
        classified.device,
        classified.stream,
        classified.correlation,
        classified.launch_name,
        {{ round_up_to_unit(hta_float_time('classified.launch_ts_ns', base), unit) }}
            as launch_ts_ns,
        {{ round_down_to_unit(
            hta_float_time(
                '(' ~ hta_float_time('classified.launch_ts_ns', base)
                ~ ' + classified.launch_end_ns - classified.launch_ts_ns)',
                base,
            ),
            unit,
        ) }} as launch_end_ns,
        {{ round_up_to_unit(hta_float_time('classified.ts_ns', base), unit) }} as ts_ns,
        {{ round_down_to_unit(
            hta_float_time(
                '(' ~ hta_float_time('classified.ts_ns', base) ~ ' + classified.dur_ns)', base
            ),
            unit,
        ) }} as end_ns
    from {{ ref('int_kernels_classified') }} as classified
    inner join traces
        on classified.trace_id = traces.trace_id
    where
        classified.launch_name in (
            {%- for name in var('kernel_launch_runtime_names') %}
                '{{ name }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
),

counted as (
    {{ hta_counted_work('kernels') }}
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        iteration,
        name,
        category,
        device,
        stream,
        correlation as correlation_id,
        launch_name,
        launch_ts_ns,
        launch_end_ns - launch_ts_ns as cpu_duration_ns,
        ts_ns,
        end_ns - ts_ns as gpu_duration_ns,
        greatest(ts_ns - launch_end_ns, 0) as launch_delay_ns,
        end_ns - ts_ns < launch_end_ns - launch_ts_ns
        and launch_end_ns - launch_ts_ns <= {{ var('launch_runtime_outlier_ns') }}
            as is_short_kernel,
        launch_end_ns - launch_ts_ns > {{ var('launch_runtime_outlier_ns') }}
            as is_runtime_outlier,
        greatest(ts_ns - launch_end_ns, 0) > {{ var('launch_delay_outlier_ns') }}
            as is_launch_delay_outlier
    from counted
)

select * from final
