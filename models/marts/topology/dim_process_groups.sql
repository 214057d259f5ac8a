{#
    The mart people and reports read; the rules live in int_process_groups_resolved
    (models/intermediate/topology), so that no model upstream of a mart
    reads a mart.
#}

with

final as (
    select * from {{ ref('int_process_groups_resolved') }}
)

select * from final
