{#
    Traces written by an ingest older than the lake's current format 5
    (tracehouse.core.warehouse.LAKE_FORMAT; traces.lake_format NULL: before
    2). Before 2 their slices lack the context ingest now computes (is_gpu,
    frames, launches), so their kernels and frames are missing from the
    marts; before 3 their annotation ranges, before 4 the ranges' paths
    (int_slices_contextualized reads their slices by the rule has_role
    stands for), before 5 whether their ops carry shapes (the FLOP model
    reads them as if they did). A warning naming each, not an error: the other traces
    still build. `tracehouse ingest` on their paths parses
    them again (same ids). Not a staging test (tag `lake`), so that a plain
    `tracehouse build` runs it. It reads int_traces_loaded, the lake's
    `traces` rows kept as a table, not stg_lake__traces, which opens every
    trace's `traces` file: 1.1 s of a 256 x 2 build for the same rows
    (benchmarks/README.md, "Where a full build's time goes").
#}

{{ config(severity='warn') }}

with

traces as (
    select
        run_id,
        trace_id,
        path,
        lake_format
    from {{ ref('int_traces_loaded') }}
),

final as (
    select
        run_id,
        trace_id,
        path
    from traces
    where coalesce(lake_format, 0) < 5
)

select * from final
