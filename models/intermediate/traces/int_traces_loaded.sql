{#
    One row per loaded trace (trace_id): the lake's `traces` table as
    stg_lake__traces reads it, kept as a table per trace
    (materialized per_trace, keyed by trace_id). The models that read
    trace attributes on every build (rank, host, start, format) and the
    Nsight marts' list of Nsight traces read this table, per-trace models
    too (int_slices_contextualized, int_stream_idle_categorized: their new
    traces' rows here are built before them in the same build); through
    the staging view each of those ~9 reads per build opened every trace's
    `traces` file (0.11 s at 768 traces, growing with the lake), while a
    build here reads only the new traces' files (lake_scan).
#}

{%- set pending = traces_pending() %}

with

traces as (
    select *
    from {{ lake_scan('traces', pending) }}
    where {{ trace_filter(pending) }}
),

final as (
    select
        {{ lake_columns('traces') | indent(8) }}
    from traces
)

select * from final
