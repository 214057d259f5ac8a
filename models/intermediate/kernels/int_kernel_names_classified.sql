{#
    One row per distinct (category, name) of GPU work, with its kind. The rule
    lives in the `classify_kernel_kinds` macro and the `kernel_kind_patterns`
    seed; classifying distinct names (thousands) instead of kernels
    (millions) keeps the regular expressions cheap. A communication kernel
    also gets its collective operation, `comm_op`: the first
    `comm_kernel_ops` pattern (by priority, as nsys-ai orders them) its name
    matches, `other` when none does; NULL for other kinds. Kineto NCCL
    kernels carry the collective in their args too (fct_kernels'
    collective_name); the name is what every trace format has. A small
    table rebuilt each time from every loaded kernel's name.
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

comm_ops as (
    select
        priority,
        op,
        pattern
    from {{ ref('comm_kernel_ops') }}
),

op_matches as (
    select
        classified.category,
        classified.name,
        min_by(comm_ops.op, comm_ops.priority) as comm_op
    from classified
    inner join comm_ops
        on {{ regex_matches('classified.name', 'comm_ops.pattern') }}
    where classified.kind = 'communication'
    group by 1, 2
),

final as (
    select
        classified.category,
        classified.name,
        classified.kind,
        classified.pattern_id,
        case
            when classified.kind = 'communication' then coalesce(op_matches.comm_op, 'other')
        end as comm_op
    from classified
    left join op_matches
        on
            classified.category = op_matches.category
            and classified.name = op_matches.name
)

select * from final
