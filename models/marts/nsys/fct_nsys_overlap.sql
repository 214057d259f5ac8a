{#
    One row per GPU of an Nsight Systems trace (run_id, rank): nsys-ai's
    `overlap` view. C = union of compute kernels, N = union of communication
    (NCCL) kernels, overlap_ns = |C ∩ N|; compute_only_ns = |C| - overlap,
    communication_only_ns = |N| - overlap; idle_ns = span - |C ∪ N|
    (never negative); overlap_ratio = overlap / |N| (the share of NCCL time
    hidden behind compute), NULL without NCCL.
#}

with

kernels as (
    select
        run_id,
        rank,
        nsys_class as kind,
        ts_ns,
        end_ns
    from {{ ref('fct_nsys_kernels') }}
),

islands as (
    {{ merge_intervals('kernels', ['run_id', 'rank', 'kind'], 'ts_ns', 'end_ns') }}
),

union_lengths as (
    select
        run_id,
        rank,
        cast(sum(case when kind = 'compute' then busy_ns else 0 end) as bigint) as compute_ns,
        cast(sum(case when kind = 'communication' then busy_ns else 0 end) as bigint)
            as communication_ns
    from islands
    group by 1, 2
),

overlapped as (
    {{ sweep_overlap('islands', ['run_id', 'rank']) }}
),

totals as (
    select
        run_id,
        rank,
        max(end_ns) - min(ts_ns) as span_ns,
        count(*) filter (where kind = 'compute') as compute_kernel_count,
        count(*) filter (where kind = 'communication') as communication_kernel_count
    from kernels
    group by 1, 2
),

final as (
    select
        totals.run_id,
        totals.rank,
        totals.span_ns,
        union_lengths.compute_ns - coalesce(overlapped.overlap_ns, 0) as compute_only_ns,
        union_lengths.communication_ns
        - coalesce(overlapped.overlap_ns, 0) as communication_only_ns,
        coalesce(overlapped.overlap_ns, 0) as overlap_ns,
        greatest(
            totals.span_ns - union_lengths.compute_ns - union_lengths.communication_ns
            + coalesce(overlapped.overlap_ns, 0),
            0
        ) as idle_ns,
        case
            when union_lengths.communication_ns > 0
                then
                    cast(coalesce(overlapped.overlap_ns, 0) as double)
                    / union_lengths.communication_ns
        end as overlap_ratio,
        totals.compute_kernel_count,
        totals.communication_kernel_count
    from totals
    inner join union_lengths
        on
            totals.run_id = union_lengths.run_id
            and totals.rank = union_lengths.rank
    left join overlapped
        on
            totals.run_id = overlapped.run_id
            and totals.rank = overlapped.rank
)

select * from final
