{#
    The GPU work Holistic Trace Analysis analyses, as a query over the CTE
    `kernels` (needs trace_id and launch_ts_ns). HTA filters a trace's work
    only when it holds at least two ProfilerSteps
    (Trace._filter_irrelevant_gpu_kernels, include_last_profiler_step=True):
    it then keeps the work whose launch is in the trace and starts before
    the last step ends, and drops the rest (work queued before profiling
    began has no launch to join to). With one step or none it keeps every
    kernel, copy and fill. HTA counts the steps of every trace it loads
    together; here a trace's own steps decide, so that a trace's rows do not
    change when another trace joins its run. One definition for the idle
    and launch models.
#}
{% macro hta_counted_work(kernels) -%}
    select {{ kernels }}.*
    from {{ kernels }}
    left join (
        select
            trace_id,
            max(end_ns) as last_step_end_ns
        from {{ ref('int_step_windows_resolved') }}
        group by 1
        having count(distinct step_number) >= 2
    ) as last_steps
        on {{ kernels }}.trace_id = last_steps.trace_id
    where
        last_steps.trace_id is null
        or {{ kernels }}.launch_ts_ns <= last_steps.last_step_end_ns
{%- endmacro %}
