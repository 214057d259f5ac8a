{#
    The clock alignment mode of int_rank_clock_offsets_estimated: var('clock_offset_mode'),
    checked, so a typo fails the build with the valid choices instead of
    silently aligning nothing.
#}
{% macro clock_offset_mode() -%}
    {%- set mode = var('clock_offset_mode', 'auto') -%}
    {%- if mode not in ['auto', 'collectives', 'first_step', 'none'] -%}
        {{ exceptions.raise_compiler_error(
            "var clock_offset_mode is '" ~ mode ~ "'; choose auto, collectives, first_step or none"
        ) }}
    {%- endif -%}
    {{ return(mode) }}
{%- endmacro %}
