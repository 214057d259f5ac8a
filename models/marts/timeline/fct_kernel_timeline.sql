{#
    One row per GPU kernel, copy or fill: run x rank x kernel, key
    (trace_id, slice_id), with only what a timeline draws (rank, stream,
    iteration, kind, name, start and end on the rank's clock), written in
    the order a timeline reads it: run, iteration, rank.

    Why a table of its own beside fct_kernels: fct_kernels is a view that
    joins the run's lookups and the FLOP models into the per-trace kernel
    table at read time, and that table lies in no useful order, so a window
    of a few ranks read every row group of it (8 M kernels at 1,024 ranks x
    4 iterations: 0.4-1 s per first view in `tracehouse serve`). Here DuckDB's
    zone maps skip row groups: ordered by iteration, a time window reads
    the row groups of the iterations it covers; within one, ordered by rank,
    a few ranks' window reads one or two row groups. Cost: 1.0 CPU s of a
    48 CPU s build at 256 ranks x 2 iterations (benchmarks/README.md). The columns are
    int_kernels_classified's, unchanged (one definition: fct_kernels shows
    the same rows with more columns).

    Per trace (materialized per_trace, keyed by trace_id): a build
    that adds traces appends their kernels, in this order among themselves.
#}

with

kernels as (
    select
        run_id,
        rank,
        iteration,
        stream,
        trace_id,
        slice_id,
        kind,
        name,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where {{ trace_filter(traces_pending()) }}
),

final as (
    select * from kernels
)

select * from final
-- run_id, iteration, rank: enough for the zone maps (a row group holds a
-- few dozen ranks of one iteration); sorting on the start too cost 0.3-0.5
-- CPU s more at 256 ranks x 2 iterations (1 M kernels) and pruned nothing more.
order by 1, 3 nulls last, 2
