{#
    The one kernel classification rule. Given a relation (or CTE name) with
    distinct (category, name) pairs of GPU work, returns a select of
    (category, name, kind, pattern_id): the kind of the matching pattern of
    the `kernel_kind_patterns` seed with the lowest priority, else
    var('default_kernel_kind') with a NULL pattern_id. Patterns match the
    column named in the seed's `match_on` (`category` or `name`).
#}
{% macro classify_kernel_kinds(kernel_names) -%}
    select
        kernel_names.category,
        kernel_names.name,
        coalesce(
            first_match.kind, '{{ var("default_kernel_kind") }}'
        ) as kind,
        first_match.pattern_id
    from {{ kernel_names }} as kernel_names
    left join (
        select
            ranked.category,
            ranked.name,
            ranked.kind,
            ranked.pattern_id
        from (
            select
                candidates.category,
                candidates.name,
                patterns.kind,
                patterns.pattern_id,
                row_number() over (
                    partition by candidates.category, candidates.name
                    order by patterns.priority, patterns.pattern_id
                ) as match_rank
            from {{ kernel_names }} as candidates
            inner join {{ ref('kernel_kind_patterns') }} as patterns
                on (
                    patterns.match_on = 'category'
                    and {{ regex_matches('candidates.category', 'patterns.pattern') }}
                )
                or (
                    patterns.match_on = 'name'
                    and {{ regex_matches('candidates.name', 'patterns.pattern') }}
                )
        ) as ranked
        where ranked.match_rank = 1
    ) as first_match
        on kernel_names.category is not distinct from first_match.category
        and kernel_names.name is not distinct from first_match.name
{%- endmacro %}
