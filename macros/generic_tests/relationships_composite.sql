{#
    Fails for every row of the model whose composite reference has no match
    in `to`: `from_columns[i]` refers to `to_columns[i]`. Rows where any of
    the referring columns is NULL are not checked (no reference). Used for
    keys local to a trace, e.g. (trace_id, parent_id) -> (trace_id, slice_id).
#}
{% test relationships_composite(model, to, from_columns, to_columns) %}

{% if from_columns | length != to_columns | length %}
    {{ exceptions.raise_compiler_error(
        "relationships_composite: from_columns and to_columns must have the same length"
    ) }}
{% endif %}

with

referring as (
    select
        {% for column in from_columns -%}
        {{ column }},
        {% endfor -%}
        count(*) as row_count
    from {{ model }}
    where
        {% for column in from_columns -%}
        {{ column }} is not null{% if not loop.last %} and {% endif %}
        {% endfor %}
    group by {{ range(1, from_columns | length + 1) | join(', ') }}
),

referred as (
    select distinct
        {% for column in to_columns -%}
        {{ column }}{% if not loop.last %},{% endif %}
        {% endfor %}
    from {{ to }}
),

orphans as (
    select referring.*
    from referring
    left join referred
        on
            {% for i in range(from_columns | length) -%}
            referring.{{ from_columns[i] }} = referred.{{ to_columns[i] }}
            {%- if not loop.last %} and {% endif %}
            {% endfor %}
    where referred.{{ to_columns[0] }} is null
)

select * from orphans

{% endtest %}
