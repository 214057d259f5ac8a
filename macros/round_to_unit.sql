{#
    Integer rounding of non-negative ns timestamps to a multiple of `unit`
    (an integer literal), without floating point (absolute ns clocks exceed
    a double's 53-bit mantissa). A unit of 1 compiles to the bare column.
#}
{% macro round_down_to_unit(column, unit) -%}
    {%- if unit | int == 1 -%}
        {{ column }}
    {%- else -%}
        ({{ column }} - mod({{ column }}, {{ unit | int }}))
    {%- endif -%}
{%- endmacro %}

{% macro round_up_to_unit(column, unit) -%}
    {%- if unit | int == 1 -%}
        {{ column }}
    {%- else -%}
        ({{ column }} + mod({{ unit | int }} - mod({{ column }}, {{ unit | int }}), {{ unit | int }}))
    {%- endif -%}
{%- endmacro %}
