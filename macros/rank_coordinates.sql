{#
    rank_coordinates(alias): the rank's coordinates as every mart that
    people or reports read per rank carries them (from dim_ranks, joined
    as `alias`), so no reader joins dim_ranks itself: host, tp/cp/ep/dp
    ranks, pipeline stage and size, pipeline group and model replica.
#}
{% macro rank_coordinates(alias) -%}
    {%- for column in [
        'host_name', 'tp_rank', 'cp_rank', 'ep_rank', 'dp_rank', 'pp_stage', 'pp_size',
        'pp_group_index', 'model_replica',
    ] -%}
        {{ alias }}.{{ column }}{{ ',' if not loop.last }}
    {% endfor -%}
{%- endmacro %}
