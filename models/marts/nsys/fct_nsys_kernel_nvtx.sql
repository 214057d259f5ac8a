{#
    One row per kernel of an Nsight Systems trace (trace_id, slice_id) with
    the innermost NVTX push/pop range enclosing its launch call on the
    launching thread (nsys-ai's nvtx_kernel_map): `nvtx_slice_id`,
    `nvtx_name`, `nvtx_depth` (enclosing ranges - 1; NULL with none) and
    `nvtx_path` (their names, outermost first, joined by ' > ').

    Ingest nests each thread's slices (a parent is the deepest slice that
    wholly contains the child), so the enclosing ranges are the NVTX
    ancestors of the launch slice; this walks that chain upwards.
#}

{#- The Nsight traces, read once: the lake scan reads only their files, and
    none at all on a warehouse of Kineto traces (macros/per_trace.sql,
    macros/lake_scan.sql). -#}
{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with recursive

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        short_name,
        launch_slice_id,
        ts_ns,
        end_ns
    from {{ ref('fct_kernels') }}
    where
        category = 'kernel'
        and {{ trace_filter(nsys_traces) }}
),

slices as (
    select
        trace_id,
        slice_id,
        parent_id,
        category,
        name,
        args
    from {{ lake_scan('slices', nsys_traces) }}
    where
        category in ('nvtx', 'cuda_runtime', 'cuda_driver')
        and {{ trace_filter(nsys_traces) }}
),

ancestors as (
    select
        kernels.trace_id,
        kernels.slice_id as kernel_slice_id,
        launch.parent_id as ancestor_id,
        1 as distance
    from kernels
    inner join slices as launch
        on
            kernels.trace_id = launch.trace_id
            and kernels.launch_slice_id = launch.slice_id
    where launch.parent_id is not null
    union all
    select
        ancestors.trace_id,
        ancestors.kernel_slice_id,
        parent.parent_id as ancestor_id,
        ancestors.distance + 1 as distance
    from ancestors
    inner join slices as parent
        on
            ancestors.trace_id = parent.trace_id
            and ancestors.ancestor_id = parent.slice_id
    where parent.parent_id is not null
),

nvtx_ancestors as (
    select
        ancestors.trace_id,
        ancestors.kernel_slice_id,
        ancestors.ancestor_id,
        ancestors.distance,
        slices.name
    from ancestors
    inner join slices
        on
            ancestors.trace_id = slices.trace_id
            and ancestors.ancestor_id = slices.slice_id
    where
        {{ is_nvtx_push_pop_range('slices') }}
),

innermost as (
    select
        trace_id,
        kernel_slice_id,
        min_by(ancestor_id, distance) as nvtx_slice_id,
        min_by(name, distance) as nvtx_name,
        count(*) - 1 as nvtx_depth,
        {{ string_agg_ordered('name', "' > '", 'distance desc') }} as nvtx_path
    from nvtx_ancestors
    group by 1, 2
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.short_name,
        kernels.ts_ns,
        kernels.end_ns,
        innermost.nvtx_slice_id,
        innermost.nvtx_name,
        innermost.nvtx_depth,
        innermost.nvtx_path
    from kernels
    left join innermost
        on
            kernels.trace_id = innermost.trace_id
            and kernels.slice_id = innermost.kernel_slice_id
)

select * from final
