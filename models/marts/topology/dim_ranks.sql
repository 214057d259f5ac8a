{#
    The mart people and reports read; the rules live in int_ranks_placed
    (models/intermediate/topology), so that no model upstream of a mart
    reads a mart.
#}

with

final as (
    select * from {{ ref('int_ranks_placed') }}
)

select * from final
