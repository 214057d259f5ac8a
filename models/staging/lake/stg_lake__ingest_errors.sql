{#
    One row per failed attempt to load a file. Errors carry no trace_id
    (nothing was loaded), so there is no commit filter here.
#}

with

source as (
    select * from {{ lake_source('ingest_errors') }}
),

renamed as (
    select
        ---------- ids
        run_id,

        ---------- strings
        path,
        error_kind,
        message,
        hint,

        ---------- numerics
        size_bytes,

        ---------- times (ns)
        mtime_ns,

        ---------- timestamps
        detected_at

    from source
)

select * from renamed
