{#
    One row per group of a topology file beside the traces
    (run_id, topology_id, kind, group_index). Topology files are not traces,
    so there is no commit marker to filter on: each file lands by one rename.
#}

with

lake_topology_groups as (
    select * from {{ lake_source('topology_groups') }}
),

renamed as (
    select
        ---------- ids
        run_id,
        topology_id,
        kind,
        group_index,

        ---------- strings
        source,
        pg_name,
        pg_desc,
        rank_order,
        path,
        content_hash,

        ---------- numerics
        ranks,
        group_size,
        world_size,
        tp_size,
        pp_size,
        vpp_size,
        cp_size,
        ep_size,
        etp_size,
        dp_size,
        edp_size,
        size_bytes,
        mtime_ns,

        ---------- timestamps
        ingested_at

    from lake_topology_groups
)

select * from renamed
