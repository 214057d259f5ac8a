{#
    One row per island of GPU busy time: run x rank x iteration x kind x
    trace x island. Kinds are compute, communication, memory, and `all` (every
    kernel, copy and fill, whatever its kind) for span and idle.

    Gaps and islands (macro merge_intervals): an interval opens a new
    island when it starts strictly after the largest end seen before it in
    its partition, so touching intervals (start = previous end) merge and
    nested ones are swallowed. Per kind one sort and two running windows
    per partition, then a second, smaller merge of those islands into the
    `all` islands (macro merge_intervals_by_kind); no pairwise interval join.
    Interval bounds: each kernel's start rounded up and end rounded down to
    var('kernel_time_unit_ns'): 1 (default) keeps ns exactly; 1000
    reproduces Holistic Trace Analysis, which rounds ns-resolution traces
    inward to whole microseconds (a sub-microsecond kernel then gets a
    negative length, as in HTA).
    Per trace (materialized per_trace, keyed by trace_id): islands
    are merged within a trace. A trace is one profiling window of one rank,
    so the kernels of one rank and iteration lie in one trace (ingest
    rejects a rank twice in one iteration folder), and kernels outside every
    step in different traces of a rank lie in disjoint windows: summing
    islands across traces (fct_rank_iterations) gives the union.
#}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        kind,
        {{ round_up_to_unit('ts_ns', var('kernel_time_unit_ns')) }} as ts_ns,
        {{ round_down_to_unit('end_ns', var('kernel_time_unit_ns')) }} as end_ns
    from {{ ref('int_kernels_classified') }}
    where {{ trace_filter(traces_pending()) }}
),

{# Islands of each kind, then of all kernels from those islands
   (macro merge_intervals_by_kind). #}
merged as (
    {{ merge_intervals_by_kind(
        'kernels', ['trace_id', 'iteration'], 'ts_ns', 'end_ns', carry=['run_id', 'rank'],
    ) }}
),

final as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        kind,
        island_number,
        start_ns,
        end_ns,
        busy_ns,
        interval_count
    from merged
)

select * from final
