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
    in_nsys_capture_window(): the predicate that GPU work of an Nsight
    Systems trace (start and end columns, absolute ns; the trace's
    base_time_ns) lies wholly inside the capture window
    var('nsys_window_start_ns') .. var('nsys_window_end_ns') (capture-clock
    ns, as nsys shows them; `tracehouse nsys --trim` sets them); `true`
    when neither is set. nsys-ai's --trim counts a kernel only when it lies
    wholly inside.
#}
{% macro in_nsys_capture_window(start_column, end_column, base_column) -%}
    {%- set window_start = var('nsys_window_start_ns') -%}
    {%- set window_end = var('nsys_window_end_ns') -%}
    {%- if window_start is none and window_end is none -%}
        true
    {%- else -%}
        (
            {%- if window_start is not none %}
            {{ start_column }} - {{ base_column }} >= {{ window_start | int }}
            {%- endif %}
            {%- if window_start is not none and window_end is not none %} and{% endif %}
            {%- if window_end is not none %}
            {{ end_column }} - {{ base_column }} <= {{ window_end | int }}
            {%- endif %}
        )
    {%- endif -%}
{%- endmacro %}

{#
    annotated_cpu_slices(pending): the CPU slices of the traces `pending`
    (traces_pending()) as a subquery of (trace_id, slice_id, parent_id,
    is_annotation): the nodes an upward walk passes (nearest_annotations).
    The annotation flag comes from a second, narrow scan of the few rows
    whose category can be one, so that `args` is read for them only.
#}
{% macro annotated_cpu_slices(pending) -%}
    (
        select
            cpu.trace_id,
            cpu.slice_id,
            cpu.parent_id,
            annotations.slice_id is not null as is_annotation
        from {{ lake_scan('slices', pending) }} as cpu
        left join (
            select
                trace_id,
                slice_id
            from {{ lake_scan('slices', pending) }}
            where
                category in ('user_annotation', 'nvtx')
                and {{ is_annotation_range() }}
                and {{ trace_filter(pending) }}
        ) as annotations
            on
                cpu.trace_id = annotations.trace_id
                and cpu.slice_id = annotations.slice_id
        where
            not cpu.is_gpu
            and {{ trace_filter(pending, 'cpu.trace_id') }}
    )
{%- endmacro %}

{#
    nearest_annotations(starts, slices): for each row of `starts`
    (trace_id, slice_id, from_id: the first slice to test, a parent), the
    nearest annotation range at or above from_id along the parent links of
    `slices` (annotated_cpu_slices): a subquery of (trace_id, slice_id,
    annotation_slice_id, distance), distance 1 when from_id is the
    annotation itself; a start with none above it has no row. The walk
    stops at the first annotation, so its cost is the number of
    non-annotation slices between, not the depth of the thread's stack.
#}
{% macro nearest_annotations(starts, slices) -%}
    (
        with recursive walk as (
            select
                trace_id,
                slice_id,
                from_id as at_id,
                1 as distance
            from {{ starts }}
            where from_id is not null
            union all
            select
                walk.trace_id,
                walk.slice_id,
                reached.parent_id as at_id,
                walk.distance + 1 as distance
            from walk
            inner join {{ slices }} as reached
                on
                    walk.trace_id = reached.trace_id
                    and walk.at_id = reached.slice_id
            where
                not reached.is_annotation
                and reached.parent_id is not null
        )

        select
            walk.trace_id,
            walk.slice_id,
            walk.at_id as annotation_slice_id,
            walk.distance
        from walk
        inner join {{ slices }} as reached
            on
                walk.trace_id = reached.trace_id
                and walk.at_id = reached.slice_id
        where reached.is_annotation
    )
{%- endmacro %}
