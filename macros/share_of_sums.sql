{#
    share_of_sums(part, whole): the one definition of a share, a ratio of
    sums over the rows it covers (sum(part) / sum(whole); NULL when the
    whole is 0 or absent), never a mean of per-row ratios. So a run's share
    equals the one recomputed from its iterations' sums, and an
    iteration's from its ranks' (tests/test_models_summary.py).
#}
{% macro share_of_sums(part, whole) -%}
    cast(sum({{ part }}) as double) / nullif(sum({{ whole }}), 0)
{%- endmacro %}

{#- step_part_shares(): the six shares of the step's exclusive parts
    (fct_rank_iterations' step_part columns) over the rows aggregated,
    as <part>_share columns: one list for every mart that shows them. -#}
{% macro step_part_shares() -%}
    {%- for part in [
        'compute', 'overlap', 'exposed_communication', 'exposed_memory', 'optimizer', 'idle'
    ] -%}
        {{ share_of_sums('step_' ~ part ~ '_ns', 'step_ns') }} as {{ part }}_share
        {{- ',' if not loop.last }}
    {% endfor -%}
{%- endmacro %}
