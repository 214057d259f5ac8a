{#
    Fails for every combination of the given columns that occurs more than
    once: the uniqueness test of a composite grain, such as
    (trace_id, slice_id). A stand-in for dbt_utils.unique_combination_of_columns,
    which cannot be installed here.
#}
{% test unique_combination(model, combination_of_columns) %}

with

grain as (
    select
        {% for column in combination_of_columns -%}
        {{ column }},
        {% endfor -%}
        count(*) as row_count
    from {{ model }}
    group by {{ range(1, combination_of_columns | length + 1) | join(', ') }}
),

duplicated as (
    select *
    from grain
    where row_count > 1
)

select * from duplicated

{% endtest %}
