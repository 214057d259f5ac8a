{#
    One row per kernel of an Nsight Systems trace (trace_id, slice_id) with
    its short name: the kernel's function name without template arguments
    and parameters, as Nsight records it (`args."short name"`; nsys-ai's
    summary groups kernels by it). Kineto traces record only the full name,
    so they have no rows here and fct_kernels shows their full name.
    A small table rebuilt each time; it reads only the Nsight traces'
    files (none at all on a warehouse of Kineto traces).
#}

{%- set nsys_traces = loaded_traces("loaded.file_format = '" ~ var('nsys_file_format') ~ "'") %}

with

slices as (
    select
        trace_id,
        slice_id,
        args
    from {{ lake_scan('slices', nsys_traces) }}
    where
        category = 'kernel'
        and {{ trace_filter(nsys_traces) }}
),

final as (
    select
        trace_id,
        slice_id,
        {{ json_text('args', 'short name') }} as short_name
    from slices
    where {{ json_text('args', 'short name') }} is not null
)

select * from final
