{#
    is_nvtx_push_pop_range(): the predicate on a slice (columns category,
    args; qualified by `relation` when given) that it is an NVTX push/pop range of an Nsight Systems export
    (args `event type` = var('nsys_push_pop_event_type'), as nsys-ai reads
    them), not a mark or a start/end range. One definition for every model
    that reads NVTX ranges from the lake.
#}
{% macro is_nvtx_push_pop_range(relation=none) -%}
    {%- set prefix = relation ~ '.' if relation else '' -%}
    {{ prefix }}category = 'nvtx'
    and cast({{ json_text(prefix ~ 'args', 'event type') }} as bigint)
    = {{ var('nsys_push_pop_event_type') }}
{%- endmacro %}
