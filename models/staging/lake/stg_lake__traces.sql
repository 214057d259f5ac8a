{#
    One row per loaded trace file. The lake's `traces` file of a trace is
    renamed into place last, so this table is also the list of committed
    traces that the other staging views filter on. Column names already carry
    their units; nothing to rename.
#}

with

source as (
    select * from {{ lake_source('traces') }}
),

renamed as (
    select
        ---------- ids
        run_id,
        trace_id,
        rank,
        content_hash,
        kineto_trace_id,

        ---------- strings
        path,
        file_format,
        layout,
        engine,
        backend,
        host_name,
        distributed_info,
        device_properties,

        ---------- numerics
        world_size,
        iteration,
        min_profiler_step,
        max_profiler_step,
        schema_version,
        size_bytes,
        uncompressed_bytes,
        event_count,
        slice_count,
        flow_count,
        unpaired_flow_events,
        partial_overlap_count,
        lake_format,

        ---------- times (ns)
        mtime_ns,
        base_time_ns,
        trace_start_ns,
        trace_end_ns,

        ---------- timestamps
        ingested_at

    from source
)

select * from renamed
