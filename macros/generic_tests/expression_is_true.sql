{#
    Fails for every row where the boolean SQL expression is not true (false
    or NULL). On a column, the expression is appended to the column name
    (`expression: ">= 0"`); on a model it stands alone
    (`expression: "end_ns >= ts_ns"`). Restrict it with the standard `where`
    config.
#}
{% test expression_is_true(model, expression, column_name=none) %}

with

checked as (
    select *
    from {{ model }}
    {% if column_name is none -%}
    where not coalesce({{ expression }}, false)
    {%- else -%}
    where not coalesce({{ column_name }} {{ expression }}, false)
    {%- endif %}
)

select * from checked

{% endtest %}
