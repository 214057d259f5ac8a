{#
    One row per slice (trace_id, slice_id) of a committed trace. Rows of a
    trace whose `traces` file is not in the lake yet (a load interrupted
    mid-commit) are left out: the semi-join on the traces source is why this
    staging view reads a second source.
#}

with

source as (
    select * from {{ lake_source('slices') }}
),

committed_traces as (
    select trace_id from {{ lake_source('traces') }}
),

committed as (
    select *
    from source
    where trace_id in (select committed_traces.trace_id from committed_traces)
),

renamed as (
    {#- The column list is shared with lake_scan (macros/lake_scan.sql), which
        reads the same columns from a few traces' files by name. #}
    select
        {{ lake_columns('slices') }}
    from committed
)

select * from renamed
