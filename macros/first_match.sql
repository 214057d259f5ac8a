{#
    The one "first matching pattern" rule of the seeds: of the candidate
    rows (a relation or CTE name) sharing `partition_by`, keep the one that
    sorts first by `order_by` (a seed's priority, then its pattern_id).
    Returns every column of the relation; written with row_number rather
    than QUALIFY so it runs on Spark and Trino too.
#}
{% macro first_match(relation, partition_by, order_by) -%}
    select *
    from (
        select
            *,
            row_number() over (
                partition by {{ partition_by | join(', ') }}
                order by {{ order_by | join(', ') }}
            ) as match_rank
        from {{ relation }}
    ) as ranked_matches
    where match_rank = 1
{%- endmacro %}
