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

{#- efficiency_ratios(flops, bytes, modelled_ns, compute_ns): the efficiency
    figures of the kernels aggregated, each a ratio of sums: achieved
    TFLOP/s and TB/s over the time of the kernels with a model (FLOPs or
    bytes per ns / 1e3), FLOPs per byte, and the share of compute time
    with a model. One list for fct_op_efficiency and fct_rank_efficiency. -#}
{% macro efficiency_ratios(flops, bytes, modelled_ns, compute_ns) -%}
    {{ share_of_sums(flops, modelled_ns ~ ' * 1e3') }} as achieved_tflops,
    {{ share_of_sums(bytes, modelled_ns ~ ' * 1e3') }} as achieved_tbps,
    {{ share_of_sums(flops, bytes) }} as arithmetic_intensity,
    {{ share_of_sums(modelled_ns, compute_ns) }} as flop_coverage_ratio
{%- endmacro %}
