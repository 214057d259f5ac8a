{#
    One row per island of GPU busy time: run x rank x iteration x kind x
    island. Kinds are compute, communication, memory, and `all` (every
    kernel, copy and fill, whatever its kind) for span and idle.

    Gaps and islands (macro merge_intervals): an interval opens a new
    island when it starts strictly after the largest end seen before it in
    its partition, so touching intervals (start = previous end) merge and
    nested ones are swallowed. One sort and two running windows per
    partition; no pairwise interval join.
    Interval bounds: each kernel's start rounded up and end rounded down to
    var('kernel_time_unit_ns'): 1 (default) keeps ns exactly; 1000
    reproduces Holistic Trace Analysis, which rounds ns-resolution traces
    inward to whole microseconds (a sub-microsecond kernel then gets a
    negative length, as in HTA). An aggregate over all kernels, rebuilt
    each time.
#}

with

kernels as (
    select
        run_id,
        rank,
        iteration,
        kind,
        {{ round_up_to_unit('ts_ns', var('kernel_time_unit_ns')) }} as ts_ns,
        {{ round_down_to_unit('end_ns', var('kernel_time_unit_ns')) }} as end_ns
    from {{ ref('int_kernels_classified') }}
),

intervals as (
    select
        run_id,
        rank,
        iteration,
        kind,
        ts_ns,
        end_ns
    from kernels
    union all
    select
        run_id,
        rank,
        iteration,
        'all' as kind,
        ts_ns,
        end_ns
    from kernels
),

merged as (
    {{ merge_intervals(
        'intervals',
        ['run_id', 'rank', 'iteration', 'kind'],
        'ts_ns',
        'end_ns',
    ) }}
),

final as (
    select * from merged
)

select * from final
