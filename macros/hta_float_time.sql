{#
    A ns timestamp as Holistic Trace Analysis reads it when the models
    reproduce HTA's whole microseconds (var('kernel_time_unit_ns') other
    than 1): HTA parses a trace's microsecond timestamps into float64, which
    between 2^50 and 2^51 us (the years 2005 to 2041 since the epoch) holds
    them to 0.25 us, between 2^49 and 2^50 us to 0.125 us. It rounds to the
    nearest multiple of that step, a tie to the even multiple, as a float
    does. Other magnitudes, and ns builds (unit 1, the default: exact
    times), compile to the bare column. Integer arithmetic only: absolute ns
    clocks exceed a double's mantissa. Read by int_stream_idle_categorized
    and fct_kernel_launches.
    The magnitude is the one in the file, which HTA reads: absolute ns minus
    the trace's `baseTimeNanoseconds` (`base`, 0 when the trace has none).
    Traces of torch >= 2.4 write microseconds relative to that base (about
    2^42 us on an H200 capture, read to 0.001 us), older ones epoch
    microseconds (0.25 us steps); stepping both by the epoch made HTA's
    whole-microsecond idle split 8.6% off on the first Hopper capture.
#}
{% macro hta_float_time(column, base) -%}
    {%- if var('kernel_time_unit_ns') | int == 1 -%}
        {{ column }}
    {%- else -%}
        {%- set relative = '(' ~ column ~ ' - ' ~ base ~ ')' -%}
        (case
            {%- for step, low in [(250, 1125899906842624000), (125, 562949953421312000)] %}
                when {{ relative }} >= {{ low }} and {{ relative }} < {{ low * 2 }}
                    then {{ column }} - mod({{ relative }}, {{ step }}) + case
                        when mod({{ relative }}, {{ step }}) > {{ step // 2 }} then {{ step }}
                        when
                            mod({{ relative }}, {{ step }}) = {{ step // 2 }}
                            and mod({{ integer_divide(relative, step) }}, 2) = 1
                            then {{ step }}
                        else 0
                    end
            {%- endfor %}
            else {{ column }}
        end)
    {%- endif -%}
{%- endmacro %}
