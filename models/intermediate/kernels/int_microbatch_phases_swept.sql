{#
    One row per run x rank x trace x iteration x phase x microbatch step
    with GPU work: the kernel timings of fct_microbatch_phases before the
    run's vpp-chunk lookup is joined in. kernel_count, first start and last
    end of the group's kernels (copies and fills included); busy = union of
    all of them; compute, communication, memory = union per kind; overlap =
    (union of compute) intersected with (union of communication) (macros
    merge_intervals and sweep_overlap, as for whole iterations).

    `step_slice_id` is the outermost forward/backward step the microbatch
    ran in (NULL outside microbatches): the key fct_microbatch_phases joins
    the chunk lookup on. A microbatch is one step of its trace, so the key
    does not split a group.
    Per trace (materialized per_trace, keyed by trace_id): why not in
    the mart itself: merging every kernel of every iteration again on each
    build was the largest table rebuilt after adding one iteration.
#}

{%- set group_columns = [
    'run_id', 'rank', 'trace_id', 'iteration', 'phase', 'microbatch', 'step_slice_id',
] %}
{#- The sort keys of a group: trace_id determines run_id and rank. #}
{%- set group_keys = ['trace_id', 'iteration', 'phase', 'microbatch', 'step_slice_id'] %}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        iteration,
        phase,
        microbatch,
        case when microbatch is not null then step_slice_id end as step_slice_id,
        kind,
        ts_ns,
        end_ns
    from {{ ref('int_kernels_classified') }}
    where {{ trace_filter(traces_pending()) }}
),

{# Islands of each kind, then of all kernels from those islands (macro
   merge_intervals_by_kind); run_id and rank ride along with trace_id. #}
islands as (
    {{ merge_intervals_by_kind(
        'kernels', group_keys, 'ts_ns', 'end_ns', carry=['run_id', 'rank'],
    ) }}
),

overlap_totals as (
    {{ sweep_overlap('islands', group_columns) }}
),

unions as (
    select
        {{ group_columns | join(',\n        ') }},
        min(case when kind = 'all' then start_ns end) as first_start_ns,
        max(case when kind = 'all' then end_ns end) as last_end_ns,
        sum(case when kind = 'all' then interval_count else 0 end) as kernel_count,
        sum(case when kind = 'all' then busy_ns else 0 end) as busy_ns,
        sum(case when kind = 'compute' then busy_ns else 0 end) as compute_ns,
        sum(case when kind = 'communication' then busy_ns else 0 end) as communication_ns,
        sum(case when kind = 'memory' then busy_ns else 0 end) as memory_ns
    from islands
    group by all
),

final as (
    select
        unions.*,
        coalesce(overlap_totals.overlap_ns, 0) as overlap_ns
    from unions
    left join overlap_totals
        on
            unions.run_id = overlap_totals.run_id
            and unions.rank = overlap_totals.rank
            and unions.trace_id = overlap_totals.trace_id
            and unions.iteration is not distinct from overlap_totals.iteration
            and unions.phase = overlap_totals.phase
            and unions.microbatch is not distinct from overlap_totals.microbatch
            and unions.step_slice_id is not distinct from overlap_totals.step_slice_id
)

select * from final
