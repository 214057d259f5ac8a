{#
    One row per distinct (category, name) of GPU work, with its kind. The rule
    lives in the `classify_kernel_kinds` macro and the `kernel_kind_patterns`
    seed; classifying distinct names (thousands) instead of kernels
    (millions) keeps the regular expressions cheap. A small table rebuilt
    each time from every loaded kernel's name.
#}

with

kernels as (
    select
        category,
        name
    from {{ ref('int_slices_contextualized') }}
    where category in (
        {%- for category in var('kernel_categories') %}
            '{{ category }}'{{ "," if not loop.last }}
        {%- endfor %}
    )
),

kernel_names as (
    select distinct
        category,
        name
    from kernels
),

classified as (
    {{ classify_kernel_kinds('kernel_names') }}
),

final as (
    select * from classified
)

select * from final
