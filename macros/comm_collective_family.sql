{#
    Collective family of a c10d / gloo / NCCL collective name as profilers
    write it (`allreduce`, `reduce_scatter_tensor_coalesced`,
    `allgather_into_tensor_coalesced`, `_allgather_base`, `send`, `recv`,
    `AllReduce`): the vocabulary of comm logs' `collective` column
    (ingest/comm_log.py FAMILIES), so observed and expected collectives line
    up. Order matters: reduce_scatter before the plain reduce.
#}
{% macro comm_collective_family(name) -%}
    case
        when lower({{ name }}) like '%reduce%scatter%' then 'reduce_scatter'
        when lower({{ name }}) like '%all%gather%' then 'all_gather'
        when lower({{ name }}) like '%all%reduce%' then 'all_reduce'
        when lower({{ name }}) like '%all%to%all%' then 'all_to_all'
        when lower({{ name }}) like '%broadcast%' then 'broadcast'
        when lower({{ name }}) like '%barrier%' then 'barrier'
        when lower({{ name }}) like '%send%' then 'send'
        when lower({{ name }}) like '%recv%' then 'recv'
        when lower({{ name }}) like '%reduce%' then 'reduce'
        when lower({{ name }}) like '%gather%' then 'gather'
        when lower({{ name }}) like '%scatter%' then 'scatter'
        else 'other'
    end
{%- endmacro %}
