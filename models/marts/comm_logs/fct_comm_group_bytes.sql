{#
    Bytes per group kind and collective family of each run's comm logs:
    instance counts and bytes from fct_comm_expected_collectives (each
    instance once, not once per rank).
#}

with

instances as (
    select
        run_id,
        group_kind,
        collective,
        group_key,
        bytes,
        bus_bytes,
        in_step
    from {{ ref('fct_comm_expected_collectives') }}
),

final as (
    select
        run_id,
        group_kind,
        collective,
        count(*) as instances,
        count(distinct group_key) as group_count,
        cast(sum(bytes) as bigint) as bytes,
        cast(sum(bus_bytes) as bigint) as bus_bytes,
        cast(sum(case when in_step then bytes else 0 end) as bigint) as step_bytes
    from instances
    group by 1, 2, 3
)

select * from final
