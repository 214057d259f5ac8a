{#
    The mart people, reports and `export perfetto` read; the estimate lives
    in int_rank_clock_offsets_estimated (models/intermediate/collectives), so that no
    model upstream of a mart reads a mart.
#}

with

final as (
    select * from {{ ref('int_rank_clock_offsets_estimated') }}  -- noqa: AM04
)

select * from final  -- noqa: AM04
