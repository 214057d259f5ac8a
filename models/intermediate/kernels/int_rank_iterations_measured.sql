{#
    One row per run x rank x iteration with kernels: Holistic Trace
    Analysis' span figures of the iteration's own kernels (NULL iteration:
    kernels launched outside every ProfilerStep of a trace that has
    steps). span = last end - first start; compute, communication, memory
    = length of the union of that kind's intervals (int_kernel_intervals_merged);
    overlap = (union of compute) intersected with (union of
    communication) (int_rank_iterations_swept); exposed_communication,
    exposed_memory and idle follow from them (definitions in
    fct_rank_iterations' docs, which shows these rows beside the step).
    Both inputs are per trace and summed here: a rank's traces hold
    disjoint profiling windows.
    A table rebuilt each time from the per-trace tables.
#}

with

islands as (
    select
        run_id,
        rank,
        iteration,
        kind,
        start_ns,
        end_ns,
        busy_ns,
        interval_count
    from {{ ref('int_kernel_intervals_merged') }}
),

{# Overlap is swept per trace; a rank's traces hold disjoint windows. #}
overlap_totals as (
    select
        run_id,
        rank,
        iteration,
        cast(sum(overlap_ns) as bigint) as overlap_ns
    from {{ ref('int_rank_iterations_swept') }}
    group by 1, 2, 3
),

unions as (
    select
        run_id,
        rank,
        iteration,
        min(case when kind = 'all' then start_ns end) as first_start_ns,
        max(case when kind = 'all' then end_ns end) as last_end_ns,
        cast(sum(case when kind = 'all' then interval_count else 0 end) as bigint) as kernel_count,
        cast(sum(case when kind = 'all' then busy_ns else 0 end) as bigint) as busy_ns,
        cast(sum(case when kind = 'compute' then busy_ns else 0 end) as bigint) as compute_ns,
        cast(sum(case when kind = 'communication' then busy_ns else 0 end) as bigint)
            as communication_ns,
        cast(sum(case when kind = 'memory' then busy_ns else 0 end) as bigint) as memory_ns
    from islands
    group by 1, 2, 3
),

breakdown as (
    select
        unions.run_id,
        unions.rank,
        unions.iteration,
        unions.kernel_count,
        unions.first_start_ns,
        unions.last_end_ns,
        unions.last_end_ns - unions.first_start_ns as span_ns,
        unions.busy_ns,
        unions.compute_ns,
        unions.communication_ns,
        unions.memory_ns,
        coalesce(overlap_totals.overlap_ns, 0) as overlap_ns
    from unions
    left join overlap_totals
        on
            unions.run_id = overlap_totals.run_id
            and unions.rank = overlap_totals.rank
            and unions.iteration is not distinct from overlap_totals.iteration
),

final as (
    select
        run_id,
        rank,
        iteration,
        kernel_count,
        first_start_ns,
        last_end_ns,
        span_ns,
        busy_ns,
        compute_ns,
        communication_ns,
        memory_ns,
        overlap_ns,
        communication_ns - overlap_ns as exposed_communication_ns,
        busy_ns - (compute_ns + communication_ns - overlap_ns) as exposed_memory_ns,
        span_ns - busy_ns as idle_ns,
        case
            when communication_ns > 0
                then cast(overlap_ns as double) / communication_ns
        end as overlap_ratio
    from breakdown
)

select * from final
