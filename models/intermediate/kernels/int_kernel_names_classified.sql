{#
    One row per distinct (category, name) of GPU work, with its kind. The rule
    lives in the `classify_kernel_kinds` macro and the `kernel_kind_patterns`
    seed; classifying distinct names (thousands) instead of kernels
    (millions) keeps the regular expressions cheap.
    Incremental (macros/incremental_traces.sql): a build adds the names of
    new traces not seen before, and drops names no loaded trace has any more.
#}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{{ incremental_traces_delete_names(var('kernel_categories')) }}",
    ],
    post_hook="{{ incremental_traces_record() }}",
) }}

with

slices as (
    select
        category,
        name
    from {{ ref('stg_lake__slices') }}
    where category in (
        {%- for category in var('kernel_categories') %}
            '{{ category }}'{{ "," if not loop.last }}
        {%- endfor %}
    )
    and {{ incremental_traces_where('trace') }}
),

kernel_names as (
    select distinct
        category,
        name
    from slices
    {%- if incremental_traces_mode() == 'incremental' %}
        where not exists (
            select 1
            from {{ this }} as known
            where
                known.category = slices.category
                and known.name = slices.name
        )
    {%- endif %}
),

classified as (
    {{ classify_kernel_kinds('kernel_names') }}
),

final as (
    select * from classified
)

select * from final
