{#
    One row per what-if scenario x replay node whose work it changes
    (scenario, node_id): the work_ns the scenario replays the node with,
    in place of its measured one (end - start: a compute kernel has no end
    dependency, so the replay's work is its duration). Nodes a scenario leaves alone
    have no row. Scenarios so far:

      * no_straggler: every compute kernel at the median, over the ranks
        of its pipeline stage (int_ranks_placed; a run without stages is
        one), of the same kernel: the same iteration and position among
        the rank's compute kernels (ranks of a stage run the same program).
        The straggler what-if paper's rule (ByteDance, OSDI 2025) with the
        median its artifact uses for communication; delays and transfers
        stay as measured.
    Still to come (issue 33): ideal_communication, perfect_overlap,
    balanced_stages, no_host_gaps and a user's own scaling.
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
        start_ns,
        end_ns - start_ns as work_ns
    from {{ ref('int_replay_nodes_listed') }}
    where node_kind = 'gpu_compute'
),

ranks as (
    select
        run_id,
        rank,
        pp_stage
    from {{ ref('int_ranks_placed') }}
),

positioned as (
    select
        nodes.node_id,
        nodes.run_id,
        nodes.iteration,
        nodes.work_ns,
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
),

final as (
    select
        'no_straggler' as scenario,
        node_id,
        run_id,
        cast(
            median(work_ns) over (partition by run_id, pp_stage, iteration, kernel_position)
            as bigint
        ) as work_ns
    from positioned
)

select * from final
