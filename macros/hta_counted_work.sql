{#
    The GPU work Holistic Trace Analysis analyses, as a query over the CTE
    `kernels` (needs trace_id and launch_ts_ns): on a trace with
    ProfilerStep ranges, HTA drops work launched after the last step ends
    (Trace._filter_irrelevant_gpu_kernels with
    include_last_profiler_step=True); work without a launch in the trace is
    kept here (see int_stream_idle_categorized). One definition for the
    idle and launch models.
#}
{% macro hta_counted_work(kernels) -%}
    select {{ kernels }}.*
    from {{ kernels }}
    left join (
        select
            trace_id,
            max(end_ns) as last_step_end_ns
        from {{ ref('int_profiler_steps') }}
        group by 1
    ) as last_steps
        on {{ kernels }}.trace_id = last_steps.trace_id
    where
        last_steps.trace_id is null
        or {{ kernels }}.launch_ts_ns is null
        or {{ kernels }}.launch_ts_ns <= last_steps.last_step_end_ns
{%- endmacro %}
