{#
    One row per run x rank x process-group kind x phase: the communication
    each group kind carries, the figure the report's "communication time by
    process-group kind" draws. Per run one source: its communication
    kernels (fct_kernels, kind communication: comm_group_kind and the
    kernel's training phase), else, on a run without any (a CPU-only gloo
    capture), its c10d calls (fct_cpu_collectives' rows, event_type
    'call': gloo's waits repeat the send/recv; phase 'other'), read from
    int_cpu_collectives_classified, which gives their group kind: the
    mart's view would match every call to its exact group first, for
    nothing on a run with kernels). Durations are
    summed, so concurrent kernels both count: load, not wall time (the
    step's exposed communication is fct_rank_iterations'). A group kind
    that is not known is 'unknown'.
    A per-run table rebuilt each time.
#}

with

kernels as (
    select
        run_id,
        rank,
        coalesce(comm_group_kind, 'unknown') as group_kind,
        phase,
        dur_ns
    from {{ ref('fct_kernels') }}
    where kind = 'communication'
),

kernel_runs as (
    select distinct run_id from kernels
),

calls as (
    select
        run_id,
        rank,
        coalesce(comm_group_kind, 'unknown') as group_kind,
        'other' as phase,
        dur_ns
    from {{ ref('int_cpu_collectives_classified') }}
    where
        event_type = 'call'
        and run_id not in (select kernel_runs.run_id from kernel_runs)
),

sources as (
    select
        *,
        'gpu_kernels' as counted_from
    from kernels
    union all
    select
        *,
        'cpu_calls' as counted_from
    from calls
),

ranks as (
    select
        run_id,
        rank,
        pp_stage,
        tp_rank,
        dp_rank
    from {{ ref('dim_ranks') }}
),

final as (
    select
        sources.run_id,
        sources.rank,
        ranks.pp_stage,
        ranks.tp_rank,
        ranks.dp_rank,
        sources.counted_from,
        sources.group_kind,
        sources.phase,
        count(*) as call_count,
        cast(sum(sources.dur_ns) as bigint) as summed_dur_ns
    from sources
    left join ranks
        on
            sources.run_id = ranks.run_id
            and sources.rank = ranks.rank
    group by 1, 2, 3, 4, 5, 6, 7, 8
)

select * from final
