{#
    One row per what-if scenario x replay node whose weights it changes
    (scenario, node_id): the weights the replay gives the node in place of
    its own (tracehouse.core.replay_scenarios.apply_scenario). `work_ns`
    is the node's duration: its work where nothing ends it from outside (a
    kernel, a runtime call: end - start), else its own time after the
    dependency that ends it (a collective member's transfer after the last
    arrival, a host sync's return after the GPU op it waited for);
    `delay_ns` its start delay after its dependencies are met. NULL keeps
    the replay's weight. Nodes a scenario leaves alone have no row.

      * no_straggler: no compute kernel slower than the median, over the
        ranks of its pipeline stage (int_ranks_placed; a run without stages
        is one), of the same kernel: the same iteration and position among
        the rank's compute kernels (ranks of a stage run the same program).
        The straggler what-if paper's rule (ByteDance, OSDI 2025) with the
        median its artifact uses for communication; delays and transfers
        stay as measured. A kernel already faster than the median keeps its
        time: the scenario removes slowness, it never adds any, so it can
        only shorten the step. On a CPU-only trace, whose compute pieces
        are cut around c10d calls that fall at different points on a
        stage's ranks (pieces at one position differ 2-4x), each rank's
        pieces are scaled by (its stage's median rank compute) / (its own
        compute) where that is below 1 (the inverse of fct_stragglers'
        compute over the median); the plain per-position median made the
        megatron_cpu runs' steps 2-8% longer.
      * ideal_communication: every collective member's transfer (its time
        after the last arrival) at the bus bandwidth
        var('whatif_bus_bandwidth_gbps'): bytes x bus factor / busbw, the
        nccl-tests conventions fct_collectives uses (macro
        bus_bandwidth_factor; a P2P send/recv's factor is 1). The waits for
        the last arrival stay as the replay gives them; communication
        kernels no collective matched keep their time.
      * perfect_overlap: every communication op's transfer hidden behind
        compute: a collective member's time after the last arrival, and a
        communication kernel no collective matched, take no time. What
        stays is what no overlap hides: the waits for the last arrival
        (other ranks' work, the pipeline's data dependencies) and the
        compute itself. The bound of ideal_communication as the bandwidth
        grows without limit.
      * perfect_dp_overlap: perfect_overlap for the data-parallel
        communication alone: every communication kernel of a data-parallel
        group (int_kernels_placed's comm_group_kind dp, dp_cp or edp, the
        groups int_bubble_parts_swept counts as the `dp` lane: the
        gradient reduce-scatters / all-reduces and the distributed
        optimizer's parameter all-gathers) takes no time after its last
        arrival; every other transfer (TP, PP, the embedding group's
        all-reduce) stays as measured. What Megatron's
        --overlap-grad-reduce / --overlap-param-gather would save at best
        (findings' exposed_dp_comm prices it).
      * balanced_stages: every compute kernel of a pipeline stage scaled by
        (mean over stages of the stage's compute) / (the stage's compute),
        a stage's compute being its ranks' mean summed compute-kernel time
        in the iteration: each stage as busy as the mean stage (the
        pipeline schedule's load-balancing question). A run with one stage
        is left alone.
      * no_host_gaps: the host never holds the GPU back, as if every
        launch had been queued ahead (a CUDA graph's ideal): every runtime
        call (cpu_call, cpu_sync) takes no time and starts as soon as the
        call before it on the rank, or the sync it follows, lets it, and
        every GPU op starts as soon as its launch, stream and cross-stream
        dependencies are met (delay 0: no launch latency). GPU durations,
        transfers and waits for other ranks stay.
    On a trace without GPU ops (int_replay_host_ops_listed) the same
    rules read its thread's compute pieces (`host_compute`) as compute
    kernels, in position order, and its c10d calls (`host_communication`,
    their group kind from int_cpu_collectives_placed) as communication
    kernels (ideal_communication only where the call's bytes are known:
    the megatron_cpu captures' c10d calls carry none, and their transfers
    stay as measured); no_host_gaps takes the gaps between them away (the Python
    and host work outside the step frames), the pieces and calls stay.
    A table rebuilt each time.
#}

with

nodes as (
    select
        node_id,
        run_id,
        rank,
        iteration,
        node_kind,
        trace_id,
        slice_id,
        start_ns,
        end_ns - start_ns as work_ns
    from {{ ref('int_replay_nodes_listed') }}
    where node_kind like 'gpu_%' or node_kind like 'cpu_%' or node_kind like 'host_%'
),

ranks as (
    select
        run_id,
        rank,
        pp_stage
    from {{ ref('int_ranks_placed') }}
),

members as (
    select
        run_id,
        collective_id,
        trace_id,
        slice_id,
        op,
        bytes,
        ranks_expected
    from {{ ref('int_collective_members_aligned') }}
),

comm_kernels as (
    select
        trace_id,
        slice_id,
        comm_group_kind
    from {{ ref('int_kernels_placed') }}
    where kind = 'communication'
    union all
    select
        trace_id,
        slice_id,
        comm_group_kind
    from {{ ref('int_cpu_collectives_placed') }}
    where event_type = 'call'
),

bus_factors as (
    {{ collective_bus_factors() }}
),

compute_kernels as (
    select
        nodes.node_id,
        nodes.run_id,
        nodes.rank,
        nodes.iteration,
        nodes.work_ns,
        nodes.node_kind,
        coalesce(ranks.pp_stage, 0) as pp_stage,
        row_number() over (
            partition by nodes.run_id, nodes.rank, nodes.iteration
            order by nodes.start_ns, nodes.node_id
        ) as kernel_position
    from nodes
    left join ranks
        on
            nodes.run_id = ranks.run_id
            and nodes.rank = ranks.rank
    where nodes.node_kind in ('gpu_compute', 'host_compute')
),

{# A CPU-only trace's compute pieces are cut around its c10d calls, which
   fall at different points on a stage's ranks, so pieces do not line up by
   position: each rank's pieces are scaled by its stage's median rank
   compute over its own, where that is below 1. #}
host_rank_factors as (
    select
        run_id,
        iteration,
        rank,
        pp_stage,
        least(
            1.0,
            median(sum(work_ns)) over (partition by run_id, pp_stage, iteration)
            / nullif(sum(work_ns), 0)
        ) as factor
    from compute_kernels
    where node_kind = 'host_compute'
    group by 1, 2, 3, 4
),

no_straggler as (
    select
        'no_straggler' as scenario,
        compute_kernels.node_id,
        compute_kernels.run_id,
        case
            when compute_kernels.node_kind = 'host_compute'
                then cast(round(compute_kernels.work_ns * host_rank_factors.factor) as bigint)
            else least(
                compute_kernels.work_ns,
                cast(
                    median(compute_kernels.work_ns) over (
                        partition by
                            compute_kernels.run_id,
                            compute_kernels.node_kind,
                            compute_kernels.pp_stage,
                            compute_kernels.iteration,
                            compute_kernels.kernel_position
                    ) as bigint
                )
            )
        end as work_ns,
        cast(null as bigint) as delay_ns
    from compute_kernels
    left join host_rank_factors
        on
            compute_kernels.run_id = host_rank_factors.run_id
            and compute_kernels.iteration = host_rank_factors.iteration
            and compute_kernels.rank = host_rank_factors.rank
),


{# One instance's payload: the members' largest, as fct_collectives. #}
instances as (
    select
        run_id,
        collective_id,
        min(op) as op,
        max(bytes) as bytes,
        min(ranks_expected) as ranks_expected
    from members
    group by 1, 2
),

ideal_communication as (
    select
        'ideal_communication' as scenario,
        nodes.node_id,
        nodes.run_id,
        cast(
            round(
                coalesce(instances.bytes, 0)
                * {{ bus_bandwidth_factor('bus_factors.bus_factor', 'instances.ranks_expected') }}
                / {{ var('whatif_bus_bandwidth_gbps') }}
            ) as bigint
        ) as work_ns,
        cast(null as bigint) as delay_ns
    from nodes
    inner join members
        on
            nodes.trace_id = members.trace_id
            and nodes.slice_id = members.slice_id
    inner join instances
        on
            members.run_id = instances.run_id
            and members.collective_id = instances.collective_id
    left join bus_factors
        on instances.op = bus_factors.op
    where
        nodes.node_kind = 'gpu_communication'
        or nodes.node_kind = 'host_communication' and instances.bytes is not null
),

perfect_overlap as (
    select
        'perfect_overlap' as scenario,
        node_id,
        run_id,
        cast(0 as bigint) as work_ns,
        cast(null as bigint) as delay_ns
    from nodes
    where node_kind in ('gpu_communication', 'host_communication')
),

perfect_dp_overlap as (
    select
        'perfect_dp_overlap' as scenario,
        nodes.node_id,
        nodes.run_id,
        cast(0 as bigint) as work_ns,
        cast(null as bigint) as delay_ns
    from nodes
    inner join comm_kernels
        on
            nodes.trace_id = comm_kernels.trace_id
            and nodes.slice_id = comm_kernels.slice_id
    where
        nodes.node_kind in ('gpu_communication', 'host_communication')
        and comm_kernels.comm_group_kind in ('dp', 'dp_cp', 'edp')
),

rank_compute as (
    select
        run_id,
        rank,
        iteration,
        pp_stage,
        sum(work_ns) as compute_ns
    from compute_kernels
    group by 1, 2, 3, 4
),

stage_compute as (
    select
        run_id,
        iteration,
        pp_stage,
        avg(compute_ns) as compute_ns
    from rank_compute
    group by 1, 2, 3
),

stage_factors as (
    select
        run_id,
        iteration,
        pp_stage,
        avg(compute_ns) over (partition by run_id, iteration)
        / nullif(compute_ns, 0) as factor,
        count(*) over (partition by run_id, iteration) as stage_count
    from stage_compute
),

balanced_stages as (
    select
        'balanced_stages' as scenario,
        compute_kernels.node_id,
        compute_kernels.run_id,
        cast(round(compute_kernels.work_ns * stage_factors.factor) as bigint) as work_ns,
        cast(null as bigint) as delay_ns
    from compute_kernels
    inner join stage_factors
        on
            compute_kernels.run_id = stage_factors.run_id
            and compute_kernels.iteration = stage_factors.iteration
            and compute_kernels.pp_stage = stage_factors.pp_stage
    where stage_factors.stage_count > 1 and stage_factors.factor is not null
),

no_host_gaps as (
    select
        'no_host_gaps' as scenario,
        node_id,
        run_id,
        case when node_kind like 'cpu_%' then cast(0 as bigint) end as work_ns,
        cast(0 as bigint) as delay_ns
    from nodes
),

final as (
    select * from no_straggler
    union all
    select * from ideal_communication
    union all
    select * from perfect_overlap
    union all
    select * from perfect_dp_overlap
    union all
    select * from balanced_stages
    union all
    select * from no_host_gaps
)

select * from final
