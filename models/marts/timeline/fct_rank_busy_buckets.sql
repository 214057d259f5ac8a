{#
    One row per run x rank x time bucket with GPU work: how busy the rank's
    GPU was in that bucket, in all and per kind (compute, communication,
    memory). What a timeline of hundreds of ranks draws zoomed out, where
    one pixel covers thousands of kernels.

    Busy time is int_kernel_intervals_merged's islands (the union of the
    kind's kernels, per trace and iteration, as fct_rank_iterations' busy_ns,
    compute_ns, communication_ns and memory_ns count them) cut at bucket
    edges: summed over a rank's buckets it is the sum of those columns over
    the rank's iterations, and over the buckets of a window, the busy time
    of the kernels in it (tests/test_models_timeline.py checks both).

    Buckets: the grid of bucket_ns on the rank's own clock (bucket_start_ns
    = a multiple of bucket_ns; a reader puts it on the run's reference
    clock with dim_rank_clock_offsets). bucket_ns is one per run: the power
    of two of ns just above the run's longest iteration span divided by
    var('busy_buckets_per_iteration'), so that a rank has a few hundred
    buckets per iteration whatever the run's time scale.
    Ordered by run and bucket start, so that a time window reads only the
    row groups it covers.
#}

with

{# int_kernel_intervals_merged's islands are per iteration, and kernels of two
   iterations can run at once (work queued before profiling began, on HTA's
   negative-queue trace): merged again per trace and kind, so no time of a
   bucket is counted twice. #}
iteration_islands as (
    select
        run_id,
        rank,
        trace_id,
        kind,
        start_ns,
        end_ns
    from {{ ref('int_kernel_intervals_merged') }}
),

islands as (
    {{ merge_intervals(
        'iteration_islands', ['trace_id', 'kind'], 'start_ns', 'end_ns', carry=['run_id', 'rank']
    ) }}
),

spans as (
    select
        run_id,
        span_ns
    from {{ ref('int_rank_iterations_measured') }}
),

widths as (
    select
        run_id,
        cast(
            power(2, ceil(log2(greatest(
                max(span_ns) / {{ var('busy_buckets_per_iteration') }}, 1
            )))) as bigint
        ) as bucket_ns
    from spans
    group by 1
),

{# Each island's buckets: from its start's to its last ns's; an island of
   no length (or a negative one, from var('kernel_time_unit_ns')
   rounding) stays whole in its start's bucket. #}
island_buckets as (
    select
        islands.run_id,
        islands.rank,
        islands.kind,
        islands.start_ns,
        islands.end_ns,
        widths.bucket_ns,
        {{ explode_with_position(
            integer_range(
                integer_divide('islands.start_ns', 'widths.bucket_ns'),
                integer_divide('greatest(islands.start_ns, islands.end_ns - 1)', 'widths.bucket_ns')
                ~ ' + 1'
            ),
            'bucket_index',
            'bucket_position'
        ) }}
    from islands
    inner join widths on islands.run_id = widths.run_id
),

clipped as (
    select
        run_id,
        rank,
        kind,
        bucket_ns,
        bucket_index * bucket_ns as bucket_start_ns,
        least(end_ns, (bucket_index + 1) * bucket_ns)
        - greatest(start_ns, bucket_index * bucket_ns) as busy_ns
    from island_buckets
),

final as (
    select
        run_id,
        rank,
        bucket_start_ns,
        bucket_ns,
        cast(sum(case when kind = 'all' then busy_ns else 0 end) as bigint) as busy_ns,
        cast(sum(case when kind = 'compute' then busy_ns else 0 end) as bigint) as compute_ns,
        cast(sum(case when kind = 'communication' then busy_ns else 0 end) as bigint)
            as communication_ns,
        cast(sum(case when kind = 'memory' then busy_ns else 0 end) as bigint) as memory_ns
    from clipped
    group by 1, 2, 3, 4
)

select * from final
-- run_id, bucket_start_ns, rank
order by 1, 3, 2
