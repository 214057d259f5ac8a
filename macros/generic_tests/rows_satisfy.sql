{#
    Every row-level check of a model in one test: columns that must not be
    NULL, columns whose values must be in a list, and boolean expressions
    that must hold (false and NULL fail, as expression_is_true; each may
    carry its own `where`). One row per failing check comes back, naming it
    (`failed_check`) with its count of failing rows, so a failure says which
    rule broke; run the test's compiled SQL, or add --store-failures, to see
    them.
    Why one test, not one per column: dbt spends ~15-20 ms of Python per
    test node (context, compile, materialization, events) whatever its SQL,
    and the 256 x 2 benchmark's build ran 225 data tests of which 165 were
    such checks: ~3.8 s of its ~26 s wall time went to tests, ~1 s of that
    in SQL (benchmarks/README.md). One scan of the model counts every check.
    `unique`: the model's grain, columns whose combination must not repeat
    (NULLs compare equal, as in a GROUP BY); the check counts the key values
    that occur more than once. In the same test for the same reason: the
    build ran a unique_combination node beside each mart's row checks, 48
    more nodes. To see the duplicate keys, run the check's group by.
    Warn-severity tests stay separate: a warning must not fail a build.
#}
{% test rows_satisfy(model, not_null=[], accepted_values={}, expressions=[], unique=[]) %}

{%- set checks = [] -%}
{%- for column in not_null -%}
    {%- do checks.append({'name': column ~ ' is not null', 'fails': column ~ ' is null'}) -%}
{%- endfor -%}
{%- for column, values in accepted_values.items() -%}
    {%- set quoted = [] -%}
    {%- for value in values -%}
        {%- do quoted.append("'" ~ (value | string | replace("'", "''")) ~ "'") -%}
    {%- endfor -%}
    {%- do checks.append({
        'name': column ~ ' in (' ~ (values | join(', ')) ~ ')',
        'fails': column ~ ' not in (' ~ (quoted | join(', ')) ~ ')',
    }) -%}
{%- endfor -%}
{%- for item in expressions -%}
    {%- set check = item if item is mapping else {'expression': item} -%}
    {%- set fails = 'not coalesce(' ~ check['expression'] ~ ', false)' -%}
    {%- if check.get('where') -%}
        {%- set fails = '(' ~ check['where'] ~ ') and ' ~ fails -%}
    {%- endif -%}
    {%- do checks.append({'name': check.get('name') or check['expression'], 'fails': fails}) -%}
{%- endfor -%}
{%- if not checks and not unique -%}
    {{ exceptions.raise_compiler_error("rows_satisfy on " ~ model ~ ": no checks given") }}
{%- endif %}

with

{% if checks -%}
failing_counts as (
    select
        {%- for check in checks %}
        sum(case when {{ check['fails'] }} then 1 else 0 end) as check_{{ loop.index }}
        {{- "," if not loop.last }}
        {%- endfor %}
    from {{ model }}
),

{% endif -%}
{% if unique -%}
repeated_keys as (
    select count(*) as repeated_key_count
    from (
        select {{ unique | join(', ') }}
        from {{ model }}
        group by {{ range(1, unique | length + 1) | join(', ') }}
        having count(*) > 1
    ) as repeated_key_values
),

{% endif -%}
failed_checks as (
    {%- if unique %}
    select
        'unique ({{ unique | join(", ") }})' as failed_check,
        repeated_key_count as failing_rows
    from repeated_keys
    where repeated_key_count > 0
    {%- if checks %}
    union all
    {%- endif %}
    {%- endif %}
    {%- for check in checks %}
    select
        {#- Quotes become double quotes in the label: Spark reads '' in a
            string literal as two literals, DuckDB as one quote. #}
        '{{ check["name"] | replace("'", '"') }}' as failed_check,
        check_{{ loop.index }} as failing_rows
    from failing_counts
    where check_{{ loop.index }} > 0
    {%- if not loop.last %}
    union all
    {%- endif %}
    {%- endfor %}
)

select * from failed_checks

{% endtest %}
