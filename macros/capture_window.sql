{#
    capture_window_conditions(relation): ` and ...` conditions keeping GPU
    work (columns trace_id, ts_ns, end_ns of `relation`) wholly inside the
    capture window var('capture_window_start_ns' / 'capture_window_end_ns'),
    in ns since its trace's base time, as nsys-ai's --trim counts kernels;
    empty when both are unset (the default). The one definition, for
    int_kernels_classified (every kernel model below it) and
    int_nsys_iterations_windowed (which reads kernels before it).
#}
{% macro capture_window_conditions(relation) -%}
    {%- for bound, column, op in [('capture_window_start_ns', 'ts_ns', '>='),
                                   ('capture_window_end_ns', 'end_ns', '<=')] %}
        {%- if var(bound) is not none %}
            and {{ relation }}.{{ column }} - (
                select traces.base_time_ns from {{ ref('int_traces_loaded') }} as traces
                where traces.trace_id = {{ relation }}.trace_id
            )
            {{ op }} {{ var(bound) | int }}
        {%- endif %}
    {%- endfor %}
{%- endmacro %}
