{#
    Fails for every row whose step parts do not add up to its whole
    exactly. The parts are the model's columns whose YAML carries
    `meta: {step_part: true}` (found in the graph, so a part added to the
    YAML is checked without naming it here); rows where the whole is NULL
    (no step) are left out. Returns the failing rows with their sum.
#}
{% test step_parts_add_up(model, whole) %}

{%- set parts = [] -%}
{%- if execute -%}
    {%- for node in graph.nodes.values()
        if node.resource_type == 'model' and node.name == model.identifier -%}
        {%- for column in node.columns.values()
            if column.meta.get('step_part') or column.config.get('meta', {}).get('step_part') -%}
            {%- do parts.append(column.name) -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if parts | length == 0 -%}
        {{ exceptions.raise_compiler_error(
            'step_parts_add_up: ' ~ model.identifier ~ ' has no column with meta step_part'
        ) }}
    {%- endif -%}
{%- endif %}

with

summed as (
    select
        *,
        {% for part in parts -%}
            coalesce({{ part }}, 0){{ ' + ' if not loop.last }}
        {%- endfor %} as parts_sum_ns
    from {{ model }}
    where {{ whole }} is not null
),

failing as (
    select *
    from summed
    where parts_sum_ns != {{ whole }}
)

select * from failing

{% endtest %}
