{#
    trace_threads(pending): the threads of the traces `pending`
    (traces_pending()) as a subquery: each CPU track's thread id and name,
    as the trace records them (the lake's `threads`). One read of thread
    names for the per-trace models that show them (int_cpu_steps_classified,
    int_annotation_ranges_nested).
#}
{% macro trace_threads(pending) -%}
    (
        select
            trace_id,
            track_id,
            tid,
            thread_name
        from {{ lake_scan('threads', pending) }}
        where {{ trace_filter(pending) }}
    )
{%- endmacro %}
