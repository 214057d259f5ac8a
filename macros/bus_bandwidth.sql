{#
    bus_bandwidth_factor(bus_factor, ranks): nccl-tests' factor from a
    collective's algorithm bandwidth to its bus bandwidth (busbw = algbw x
    factor; doc/PERFORMANCE.md), from the seed collective_ops' bus_factor
    text and the group's ranks: all-reduce 2(n-1)/n; all-gather,
    reduce-scatter, all-to-all (n-1)/n; anything else 1. One definition for
    fct_collectives (measured busbw) and int_whatif_work_scaled (the
    transfer at a bus bandwidth the user sets).
#}
{% macro bus_bandwidth_factor(bus_factor, ranks) -%}
    case {{ bus_factor }}
        when '2(n-1)/n'
            then 2.0 * ({{ ranks }} - 1) / {{ ranks }}
        when '(n-1)/n'
            then 1.0 * ({{ ranks }} - 1) / {{ ranks }}
        else 1.0
    end
{%- endmacro %}

{#- collective_bus_factors(): one row per collective op of the seed
    collective_ops with its bus_factor text (the seed's patterns for one op
    agree): the lookup fct_collectives and int_whatif_work_scaled join. -#}
{% macro collective_bus_factors() -%}
    select
        op,
        min(bus_factor) as bus_factor
    from {{ ref('collective_ops') }}
    group by 1
{%- endmacro %}
