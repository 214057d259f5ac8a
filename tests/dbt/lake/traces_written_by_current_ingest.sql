{#
    Traces written by an ingest older than lake format 2 (traces.lake_format
    NULL: tracehouse.core.warehouse.LAKE_FORMAT): their slices lack the context
    ingest now computes (is_gpu, frames, launches), so their kernels and
    frames are missing from the marts. A warning naming each, not an error:
    the other traces still build. `tracehouse ingest` on their paths parses
    them again (same ids). Not a staging test (tag `lake`), so that a plain
    `tracehouse build` runs it.
#}

{{ config(severity='warn') }}

with

traces as (
    select
        run_id,
        trace_id,
        path,
        lake_format
    from {{ ref('stg_lake__traces') }}
),

final as (
    select
        run_id,
        trace_id,
        path
    from traces
    where lake_format is null
)

select * from final
