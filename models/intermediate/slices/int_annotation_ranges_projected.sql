{#
    One row per annotation range with kernels (trace_id, slice_id): its
    projection onto the GPU, over the kernels (category `kernel`; copies and
    fills left out, as nsys-ai counts) whose launch call lies inside the
    range or one of its descendants (int_kernels_classified's
    annotation_slice_id: the innermost range around each launch, inside the
    capture window as every kernel model; int_annotation_ranges_nested: the
    range's lineage). kernel_count counts
    them, own_kernel_count those whose innermost range it is, gpu_start_ns /
    gpu_end_ns are the first start and last end. fct_annotation_ranges
    shows them on every range. Per trace (materialized per_trace):
    keyed by trace_id.
#}

{%- set pending = traces_pending() %}

with

kernels as (
    select
        trace_id,
        annotation_slice_id,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where
        category = 'kernel'
        and annotation_slice_id is not null
        and {{ trace_filter(pending) }}
),

{# Every (range, ancestor-or-self) pair. #}
lineage as (
    select
        trace_id,
        slice_id,
        {{ explode_with_position('lineage_range_ids', 'ancestor_id', 'lineage_position') }}
    from {{ ref('int_annotation_ranges_nested') }}
    where {{ trace_filter(pending) }}
),

final as (
    select
        lineage.trace_id,
        lineage.ancestor_id as slice_id,
        count(*) as kernel_count,
        count(case when lineage.ancestor_id = lineage.slice_id then 1 end) as own_kernel_count,
        min(kernels.ts_ns) as gpu_start_ns,
        max(kernels.end_ns) as gpu_end_ns
    from kernels
    inner join lineage
        on
            kernels.trace_id = lineage.trace_id
            and kernels.annotation_slice_id = lineage.slice_id
    group by 1, 2
)

select * from final
