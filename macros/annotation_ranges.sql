{#
    annotation_kind(): 'nvtx' or 'user_annotation', the kind of an
    annotation range (annotation_range_slices).
#}
{% macro annotation_kind(relation=none) -%}
    {%- set prefix = relation ~ '.' if relation else '' -%}
    case when {{ prefix }}category = 'nvtx' then 'nvtx' else 'user_annotation' end
{%- endmacro %}

{#
    annotation_range_slices(pending, columns): the annotation ranges of the
    traces `pending` (traces_pending()) as a subquery of `columns`: every
    Kineto user annotation (category `user_annotation`:
    torch.profiler.record_function, Megatron's and torch's own ranges,
    `ProfilerStep#N` included) and every Nsight NVTX push/pop range
    (is_nvtx_push_pop_range). Not `gpu_user_annotation`: Kineto's copies of
    user annotations on GPU tracks span the GPU work of a CPU range, a
    projection of it (fct_annotation_ranges computes its own from the
    kernels), not a range of their own. The one definition and the one
    read of ranges from the lake, for int_annotation_ranges_nested
    (int_kernels_annotated reads them there).

    Two narrow scans, so that a Kineto trace is read without `args`: its
    user annotations need only their category, and reading `args` (every
    row's: a Parquet page holds many) to test the NVTX event type of ranges
    that are not there doubled the read (0.62 s against 0.35 s at 256 ranks
    x 2 iterations). NVTX ranges come from Nsight traces
    (var('nsys_file_format'); ingest/nsys.py is the only writer of category
    `nvtx`), looked up in int_traces (loaded_traces): that scan reads only
    their files, and is left out on a warehouse without them.
#}
{% macro annotation_range_slices(pending, columns) -%}
    {%- set nsys_traces = loaded_traces(
        "loaded.file_format = '" ~ var('nsys_file_format') ~ "' and "
        ~ trace_filter(pending, 'loaded.trace_id')) -%}
    (
        select
            {{ columns | join(',\n            ') }}
        from {{ lake_scan('slices', pending) }}
        where
            category = 'user_annotation'
            and {{ trace_filter(pending) }}
        {%- if 'query' in nsys_traces or nsys_traces['ids'] | length > 0 %}
        union all
        select
            {{ columns | join(',\n            ') }}
        from {{ lake_scan('slices', nsys_traces) }}
        where
            {{ is_nvtx_push_pop_range() }}
            and {{ trace_filter(nsys_traces) }}
        {%- endif %}
    )
{%- endmacro %}
