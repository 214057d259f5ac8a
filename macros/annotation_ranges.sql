{#
    is_annotation_range(): the predicate on a lake slice (columns category,
    args; qualified by `relation` when given) that it is an annotation
    range: a Kineto user annotation (category `user_annotation`:
    torch.profiler.record_function, Megatron's and torch's own ranges,
    `ProfilerStep#N` included) or an Nsight NVTX push/pop range
    (is_nvtx_push_pop_range). Not `gpu_user_annotation`: Kineto's copies of
    user annotations on GPU tracks span the GPU work of a CPU range, a
    projection of it (fct_annotation_ranges computes its own from the
    kernels), not a range of their own. One definition for every model that
    reads annotation ranges from the lake.

    annotation_kind(): 'nvtx' or 'user_annotation', the kind of such a range.
#}
{% macro is_annotation_range(relation=none) -%}
    {%- set prefix = relation ~ '.' if relation else '' -%}
    ({{ prefix }}category = 'user_annotation' or ({{ is_nvtx_push_pop_range(relation) }}))
{%- endmacro %}

{% macro annotation_kind(relation=none) -%}
    {%- set prefix = relation ~ '.' if relation else '' -%}
    case when {{ prefix }}category = 'nvtx' then 'nvtx' else 'user_annotation' end
{%- endmacro %}

{#
    annotation_range_slices(pending, columns): the annotation ranges
    (is_annotation_range) of the traces `pending` (traces_pending()) as a
    subquery of `columns`, read from the lake with a narrow scan: the one
    read of ranges for int_annotation_ranges_nested and int_kernels_annotated.
#}
{% macro annotation_range_slices(pending, columns) -%}
    (
        select
            {%- for column in columns %}
            {{ column }}{{ "," if not loop.last }}
            {%- endfor %}
        from {{ lake_scan('slices', pending) }}
        where
            category in ('user_annotation', 'nvtx')
            and {{ is_annotation_range() }}
            and {{ trace_filter(pending) }}
    )
{%- endmacro %}
