{#
    What should I change? One row per run x iteration x rule of seed
    finding_rules: whether the rule fired, the time at stake (ns and share
    of the iteration's step), its severity, the evidence (the mart, keys
    and figure that fired it) and the Megatron-LM change to make.
    Each rule reads the marts whose figures it cites (so they equal what
    those marts show), which is why the rules live here and not in an
    intermediate model: one CTE block per rule, all returning the same
    columns. Time at stake comes from fct_what_if (the what-if models are
    built by default on DuckDB; `--vars '{whatif: false}'` and Spark leave
    them out) where it has the rule's scenario for the iteration, else from
    the direct figure (priced_by says which, and reason why). Shares are ratios of sums over the
    iteration's ranks (share_of_sums), priced at the iteration's step, but
    for exposed communication, which is priced on the rank that sets the
    step (its CTE block says why). A
    rule whose inputs are missing gives status not_evaluated and the
    reason, never no row.
#}

with

rules as (
    select * from {{ ref('finding_rules') }}
),

iterations as (
    select
        run_id,
        iteration,
        timing_source,
        ranks,
        step_ns
    from {{ ref('fct_iteration_summary') }}
    where iteration is not null and step_ns > 0
),

rank_steps as (
    select
        run_id,
        rank,
        iteration,
        step_ns,
        step_idle_ns
    from {{ ref('fct_rank_iterations') }}
    where iteration is not null and step_ns > 0
),

iteration_rank_steps as (
    select
        run_id,
        iteration,
        sum(step_ns) as rank_step_total_ns
    from rank_steps
    group by 1, 2
),

kernels as (
    select
        run_id,
        rank,
        iteration,
        trace_id,
        slice_id,
        kind,
        phase,
        comm_group_kind,
        flop_model,
        flops,
        peak_tflops,
        ts_ns,
        end_ns,
        dur_ns
    from {{ ref('fct_kernels') }}
    where iteration is not null
),

collective_waits as (
    select
        trace_id,
        slice_id,
        wait_ns
    from {{ ref('fct_collective_ranks') }}
    where device = 'gpu'
),

compute_islands as (
    select
        run_id,
        rank,
        iteration,
        start_ns,
        end_ns
    from {{ ref('int_kernel_intervals_merged') }}
    where kind = 'compute'
),

pipeline_stages as (
    select
        run_id,
        iteration,
        pp_group_index,
        pp_stage,
        busy_ns,
        bubble_ns,
        theoretical_bubble_ratio,
        group_span_ns,
        microbatches
    from {{ ref('fct_pipeline_bubbles') }}
    where iteration is not null
),

-- The bubble's parts that other rules price: idle (no kernel on the rank: the host's,
-- host_bound_launches') and exposed tensor/context/expert-parallel collectives inside
-- forward/backward (exposed_tp_comm's; Megatron without --tp-comm-overlap runs them on
-- the compute stream). Left in, a slow TP link would fire bubble_above_theory first.
stage_priced_elsewhere as (
    select
        run_id,
        iteration,
        pp_group_index,
        pp_stage,
        sum(idle_ns + collective_wait_ns) as priced_elsewhere_ns
    from {{ ref('fct_pipeline_bubble_parts') }}
    group by 1, 2, 3, 4
),

stragglers as (
    select
        run_id,
        iteration,
        rank,
        host_name,
        compute_ns,
        stage_median_compute_ns,
        compute_vs_stage_median,
        straggler_rank
    from {{ ref('fct_stragglers') }}
),

clock_offsets as (
    select
        run_id,
        host_key,
        mode,
        offset_ns
    from {{ ref('dim_rank_clock_offsets') }}
),

idle_categories as (
    select
        run_id,
        idle_category,
        idle_ns
    from {{ ref('fct_idle_breakdown') }}
),

{% if what_if_models_built() %}
    what_if as (
        select
            run_id,
            iteration,
            scenario,
            saved_ns
        from {{ ref('fct_what_if') }}
    ),
{% else %}
    what_if as (
        select
            cast(null as string) as run_id,
            cast(null as bigint) as iteration,
            cast(null as string) as scenario,
            cast(null as bigint) as saved_ns
        from iterations
        where 1 = 0
    ),
{% endif %}

-- ---- exposed communication of the rule's group kinds (exposed_dp_comm, exposed_tp_comm):
-- a kernel's transfer, after the wait for the collective's last member (a straggler's
-- cost, not the overlap's), not under a compute island of its rank; priced on the rank
-- that sets the step (the longest step, ties to the most exposed): what hiding it would
-- take off the step. A mean over ranks would dilute a cost that only some ranks pay
-- (Megatron's 1F1B overlaps only the first stage's gradient reduce), and a max over ranks
-- would count a last stage's reduce that the pipeline's drain already hides.
-- This is the direct price: exposed_tp_comm's always (no scenario hides TP alone),
-- exposed_dp_comm's where fct_what_if has no perfect_dp_overlap row (its seed scenario).
comm_transfers as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.iteration,
        kernels.trace_id,
        kernels.slice_id,
        kernels.comm_group_kind,
        least(kernels.ts_ns + coalesce(collective_waits.wait_ns, 0), kernels.end_ns) as ts_ns,
        kernels.end_ns
    from kernels
    left join collective_waits
        on
            kernels.trace_id = collective_waits.trace_id
            and kernels.slice_id = collective_waits.slice_id
    where kernels.kind = 'communication' and kernels.comm_group_kind is not null
),

comm_kernels_exposed as (
    select
        comm_transfers.run_id,
        comm_transfers.rank,
        comm_transfers.iteration,
        comm_transfers.trace_id,
        comm_transfers.slice_id,
        comm_transfers.comm_group_kind,
        comm_transfers.end_ns - comm_transfers.ts_ns as dur_ns,
        -- DuckDB's least/greatest skip NULLs: only matched islands may count.
        coalesce(sum(case
            when compute_islands.start_ns is not null
                then
                    least(comm_transfers.end_ns, compute_islands.end_ns)
                    - greatest(comm_transfers.ts_ns, compute_islands.start_ns)
        end), 0) as covered_ns
    from comm_transfers
    left join compute_islands
        on
            comm_transfers.run_id = compute_islands.run_id
            and comm_transfers.rank = compute_islands.rank
            and comm_transfers.iteration = compute_islands.iteration
            and comm_transfers.end_ns > compute_islands.start_ns
            and comm_transfers.ts_ns < compute_islands.end_ns
    group by 1, 2, 3, 4, 5, 6, 7
),

exposed_comm_figures as (
    select
        rules.rule_id,
        comm_kernels_exposed.run_id,
        comm_kernels_exposed.rank,
        comm_kernels_exposed.iteration,
        sum(comm_kernels_exposed.dur_ns - comm_kernels_exposed.covered_ns) as exposed_ns
    from comm_kernels_exposed
    inner join rules
        on
            (',' || rules.comm_group_kinds || ',')
            like ('%,' || comm_kernels_exposed.comm_group_kind || ',%')
    group by 1, 2, 3, 4
),

exposed_comm_runs as (
    select distinct
        rules.rule_id,
        kernels.run_id
    from kernels
    cross join rules
    where kernels.comm_group_kind is not null and rules.comm_group_kinds is not null
),

exposed_comm_ranks as (
    select
        exposed_comm_runs.rule_id,
        rank_steps.run_id,
        rank_steps.rank,
        rank_steps.iteration,
        rank_steps.step_ns,
        coalesce(exposed_comm_figures.exposed_ns, 0) as exposed_ns,
        row_number() over (
            partition by exposed_comm_runs.rule_id, rank_steps.run_id, rank_steps.iteration
            order by
                rank_steps.step_ns desc,
                coalesce(exposed_comm_figures.exposed_ns, 0) desc,
                rank_steps.rank asc
        ) as step_order
    from rank_steps
    inner join exposed_comm_runs
        on rank_steps.run_id = exposed_comm_runs.run_id
    left join exposed_comm_figures
        on
            exposed_comm_runs.rule_id = exposed_comm_figures.rule_id
            and rank_steps.run_id = exposed_comm_figures.run_id
            and rank_steps.rank = exposed_comm_figures.rank
            and rank_steps.iteration = exposed_comm_figures.iteration
),

exposed_comm as (
    select
        exposed_comm_ranks.rule_id,
        exposed_comm_ranks.run_id,
        exposed_comm_ranks.iteration,
        'rank ' || cast(exposed_comm_ranks.rank as string) as subject,
        exposed_comm_ranks.rank as evidence_rank,
        cast(null as bigint) as evidence_pp_group_index,
        cast(exposed_comm_ranks.exposed_ns as double) / exposed_comm_ranks.step_ns as figure,
        cast(exposed_comm_ranks.exposed_ns as double) as baseline,
        cast(exposed_comm_ranks.exposed_ns as double) / iterations.step_ns as direct_share,
        cast(null as string) as history
    from exposed_comm_ranks
    inner join iterations
        on
            exposed_comm_ranks.run_id = iterations.run_id
            and exposed_comm_ranks.iteration = iterations.iteration
    where exposed_comm_ranks.step_order = 1
),

-- ---- straggler: fct_stragglers' rank 1, its compute against its stage's median (on a
-- CPU-only run fct_stragglers' compute is the rank's step frames: the same rank the
-- report's worst offenders name, from the same timings)
straggler_history as (
    select
        run_id,
        rank,
        count(*) as times_straggler
    from stragglers
    where straggler_rank = 1
    group by 1, 2
),

run_iterations as (
    select
        run_id,
        count(*) as iteration_count
    from iterations
    group by 1
),

straggler as (
    select
        'straggler' as rule_id,
        stragglers.run_id,
        stragglers.iteration,
        'rank '
        || cast(stragglers.rank as string)
        || ' ('
        || coalesce(stragglers.host_name, 'host unknown')
        || ')' as subject,
        stragglers.rank as evidence_rank,
        cast(null as bigint) as evidence_pp_group_index,
        stragglers.compute_vs_stage_median as figure,
        cast(stragglers.stage_median_compute_ns as double) as baseline,
        -- Faster than its stage's median (the rank that caused most waiting is
        -- not always the slowest): nothing at stake.
        cast(case
            when stragglers.compute_ns > stragglers.stage_median_compute_ns
                then stragglers.compute_ns - stragglers.stage_median_compute_ns
            else 0
        end as double) / iterations.step_ns as direct_share,
        'straggler in ' || cast(straggler_history.times_straggler as string) || ' of '
        || cast(run_iterations.iteration_count as string) || ' iterations' as history
    from stragglers
    inner join iterations
        on
            stragglers.run_id = iterations.run_id
            and stragglers.iteration = iterations.iteration
    inner join straggler_history
        on
            stragglers.run_id = straggler_history.run_id
            and stragglers.rank = straggler_history.rank
    inner join run_iterations
        on stragglers.run_id = run_iterations.run_id
    where stragglers.straggler_rank = 1 and stragglers.stage_median_compute_ns > 0
),

-- ---- pipeline: per pp group its stages' busy time and the busiest stage's bubble
pipeline_groups as (
    select
        run_id,
        iteration,
        pp_group_index,
        max(group_span_ns) as group_span_ns,
        max(busy_ns) as max_busy_ns,
        avg(busy_ns) as mean_busy_ns,
        max(theoretical_bubble_ratio) as theoretical_bubble_ratio,
        max(case
            when busy_rank = 1
                then
                    cast(bubble_ns - coalesce(priced_elsewhere_ns, 0) as double)
                    / nullif(group_span_ns, 0)
        end) as busiest_bubble_ratio
    from (
        select
            pipeline_stages.*,
            stage_priced_elsewhere.priced_elsewhere_ns,
            row_number() over (
                partition by
                    pipeline_stages.run_id, pipeline_stages.iteration,
                    pipeline_stages.pp_group_index
                order by pipeline_stages.busy_ns desc, pipeline_stages.pp_stage asc
            ) as busy_rank
        from pipeline_stages
        left join stage_priced_elsewhere
            on
                pipeline_stages.run_id = stage_priced_elsewhere.run_id
                and pipeline_stages.iteration = stage_priced_elsewhere.iteration
                and pipeline_stages.pp_group_index = stage_priced_elsewhere.pp_group_index
                and pipeline_stages.pp_stage = stage_priced_elsewhere.pp_stage
    ) as ranked_stages
    group by 1, 2, 3
),

pipeline_figures as (
    select
        rules.rule_id,
        pp_groups.*,
        case rules.rule_id
            when 'stage_imbalance'
                then pp_groups.max_busy_ns / nullif(pp_groups.mean_busy_ns, 0)
            when 'bubble_above_theory'
                then
                    pp_groups.busiest_bubble_ratio
                    - coalesce(pp_groups.theoretical_bubble_ratio, 0)
            else pp_groups.theoretical_bubble_ratio
        end as figure,
        pp_groups.group_span_ns * case rules.rule_id
            when 'stage_imbalance'
                then 1 - pp_groups.mean_busy_ns / nullif(pp_groups.max_busy_ns, 0)
            when 'bubble_above_theory'
                then
                    pp_groups.busiest_bubble_ratio
                    - coalesce(pp_groups.theoretical_bubble_ratio, 0)
            else pp_groups.theoretical_bubble_ratio
        end as direct_ns
    from pipeline_groups as pp_groups
    cross join rules
    where rules.rule_id in ('stage_imbalance', 'bubble_above_theory', 'few_microbatches')
),

pipeline as (
    select
        pipeline_figures.rule_id,
        pipeline_figures.run_id,
        pipeline_figures.iteration,
        'pp group ' || cast(pipeline_figures.pp_group_index as string) as subject,
        cast(null as bigint) as evidence_rank,
        pipeline_figures.pp_group_index as evidence_pp_group_index,
        pipeline_figures.figure,
        cast(pipeline_figures.group_span_ns as double) as baseline,
        greatest(pipeline_figures.direct_ns, 0) / iterations.step_ns as direct_share,
        cast(null as string) as history
    from (
        select
            *,
            row_number() over (
                partition by rule_id, run_id, iteration order by direct_ns desc, pp_group_index asc
            ) as group_rank
        from pipeline_figures
    ) as pipeline_figures
    inner join iterations
        on
            pipeline_figures.run_id = iterations.run_id
            and pipeline_figures.iteration = iterations.iteration
    where pipeline_figures.group_rank = 1
),

-- ---- host-bound launches: the step's GPU idle share times the host-wait part of stream idle
host_wait as (
    select
        run_id,
        {{ share_of_sums("case when idle_category = 'host_wait' then idle_ns else 0 end",
            'idle_ns') }} as host_wait_ratio
    from idle_categories
    group by 1
),

most_idle_ranks as (
    select
        run_id,
        iteration,
        rank,
        step_idle_ns,
        cast(step_idle_ns as double) / step_ns as idle_share,
        row_number() over (
            partition by run_id, iteration order by step_idle_ns * 1.0 / step_ns desc, rank asc
        ) as idle_order
    from rank_steps
),

host_bound as (
    select
        'host_bound_launches' as rule_id,
        iterations.run_id,
        iterations.iteration,
        'rank ' || cast(most_idle_ranks.rank as string) as subject,
        most_idle_ranks.rank as evidence_rank,
        cast(null as bigint) as evidence_pp_group_index,
        most_idle_ranks.idle_share as figure,
        host_wait.host_wait_ratio as baseline,
        case
            when host_wait.host_wait_ratio >= {{ var('findings_host_wait_min_ratio') }}
                then cast(most_idle_ranks.step_idle_ns as double) / iterations.step_ns
            else 0
        end as direct_share,
        cast(null as string) as history
    from iterations
    inner join most_idle_ranks
        on
            iterations.run_id = most_idle_ranks.run_id
            and iterations.iteration = most_idle_ranks.iteration
            and most_idle_ranks.idle_order = 1
    inner join host_wait
        on iterations.run_id = host_wait.run_id
    where iterations.timing_source = 'gpu'
),

-- ---- kernels: recompute share, GEMMs against the roof
kernel_figures as (
    select
        run_id,
        iteration,
        sum(case when phase = 'recompute' then dur_ns else 0 end) as recompute_ns,
        sum(case when is_gemm then dur_ns else 0 end) as gemm_ns,
        sum(case when is_gemm then ideal_ns else 0 end) as gemm_ideal_ns,
        sum(case when is_gemm then greatest(dur_ns - ideal_ns / roof_target, 0) else 0 end)
            as gemm_shortfall_ns,
        count(case when is_gemm then 1 end) as gemm_count
    from (
        select
            kernels.*,
            kernels.flop_model in (
                {{ "'" ~ var('findings_gemm_flop_models') | join("', '") ~ "'" }}
            )
            and kernels.flops > 0 and kernels.peak_tflops > 0 as is_gemm,
            kernels.flops / (kernels.peak_tflops * 1e3) as ideal_ns,
            gemm_rule.threshold as roof_target
        from kernels
        cross join (
            select rules.threshold from rules
            where rules.rule_id = 'low_gemm_mfu'
        ) as gemm_rule
    ) as modelled
    group by 1, 2
),

kernel_rules as (
    select
        rules.rule_id,
        kernel_figures.run_id,
        kernel_figures.iteration,
        cast(null as string) as subject,
        cast(null as bigint) as evidence_rank,
        cast(null as bigint) as evidence_pp_group_index,
        case
            when rules.rule_id = 'recompute'
                then kernel_figures.recompute_ns / iteration_rank_steps.rank_step_total_ns
            else kernel_figures.gemm_ideal_ns / nullif(kernel_figures.gemm_ns, 0)
        end as figure,
        cast(case
            when rules.rule_id = 'recompute' then kernel_figures.recompute_ns
            else kernel_figures.gemm_ns
        end as double) as baseline,
        case
            when rules.rule_id = 'recompute' then kernel_figures.recompute_ns
            else kernel_figures.gemm_shortfall_ns
        end / iteration_rank_steps.rank_step_total_ns as direct_share,
        cast(null as string) as history
    from kernel_figures
    inner join iteration_rank_steps
        on
            kernel_figures.run_id = iteration_rank_steps.run_id
            and kernel_figures.iteration = iteration_rank_steps.iteration
    cross join rules
    where
        rules.rule_id = 'recompute'
        or (rules.rule_id = 'low_gemm_mfu' and kernel_figures.gemm_count > 0)
),

-- ---- clock skew: the spread of the hosts' estimated offsets
clock_spread as (
    select
        run_id,
        max(offset_ns) - min(offset_ns) as spread_ns,
        max(case when mode != 'none' then mode end) as alignment_mode
    from clock_offsets
    group by 1
),

clock_skew as (
    select
        'clock_skew' as rule_id,
        iterations.run_id,
        iterations.iteration,
        'clock mode ' || coalesce(clock_spread.alignment_mode, 'none') as subject,
        cast(null as bigint) as evidence_rank,
        cast(null as bigint) as evidence_pp_group_index,
        cast(clock_spread.spread_ns as double) as figure,
        cast(iterations.step_ns as double) as baseline,
        cast(clock_spread.spread_ns as double) / iterations.step_ns as direct_share,
        cast(null as string) as history
    from iterations
    inner join clock_spread
        on iterations.run_id = clock_spread.run_id
),

evaluated as (
    select * from exposed_comm
    union all
    select * from straggler
    union all
    select * from pipeline
    union all
    select * from host_bound
    union all
    select * from kernel_rules
    union all
    select * from clock_skew
),

runs_with_flops as (
    select distinct run_id from kernels
    where flops > 0
),

run_facts as (
    select
        iterations.run_id,
        max(iterations.timing_source) as timing_source,
        max(iterations.ranks) as ranks,
        max(case when runs_with_flops.run_id is not null then 1 else 0 end) as has_gemm_flops
    from iterations
    left join runs_with_flops
        on iterations.run_id = runs_with_flops.run_id
    group by 1
),

graded as (
    select
        iterations.run_id,
        iterations.iteration,
        rules.rule_id,
        rules.title,
        iterations.step_ns,
        evaluated.subject,
        rules.evidence_mart,
        evaluated.evidence_rank,
        evaluated.evidence_pp_group_index,
        rules.figure_name,
        evaluated.figure,
        rules.fires_when,
        rules.threshold,
        rules.baseline_name,
        evaluated.baseline,
        evaluated.history,
        case when what_if.saved_ns is not null then 'what_if' else 'direct' end as priced_by,
        cast(round(case
            when what_if.saved_ns is not null then greatest(cast(what_if.saved_ns as double), 0)
            else evaluated.direct_share * iterations.step_ns
        end) as bigint) as time_at_stake_ns,
        evaluated.rule_id is not null as is_evaluated,
        case
            when evaluated.rule_id is not null then null
            when
                run_facts.timing_source != 'gpu'
                and rules.rule_id not in (
                    'straggler', 'stage_imbalance', 'bubble_above_theory',
                    'few_microbatches', 'clock_skew'
                )
                then 'no GPU kernels: a CPU-only run (timing ' || run_facts.timing_source || ')'
            when rules.rule_id in ('straggler', 'clock_skew') and run_facts.ranks <= 1
                then 'one rank: nothing to compare it with'
            when rules.rule_id = 'straggler'
                then 'no rank held the others back (fct_stragglers has no straggler_rank 1)'
            when rules.rule_id in ('stage_imbalance', 'bubble_above_theory', 'few_microbatches')
                then 'no pipeline stages (pp size 1, or no topology)'
            when rules.rule_id in ('exposed_dp_comm', 'exposed_tp_comm')
                then 'no communication kernel has a process-group kind (no topology or comm args)'
            when rules.rule_id = 'low_gemm_mfu' and run_facts.has_gemm_flops = 0
                then 'no GEMM FLOPs: op shapes not recorded (record_shapes) or GPU peak unknown'
            else 'its marts have no rows for this run'
        end as not_evaluated_reason,
        rules.fire_share,
        rules.medium_share,
        rules.high_share,
        rules.whatif_scenario,
        rules.recommendation,
        rules.megatron_flags,
        rules.doc_reference,
        rules.shown_in
    from iterations
    cross join rules
    inner join run_facts
        on iterations.run_id = run_facts.run_id
    left join evaluated
        on
            rules.rule_id = evaluated.rule_id
            and iterations.run_id = evaluated.run_id
            and iterations.iteration = evaluated.iteration
    left join what_if
        on
            iterations.run_id = what_if.run_id
            and iterations.iteration = what_if.iteration
            and rules.whatif_scenario = what_if.scenario
            and evaluated.rule_id is not null
),

fired as (
    select
        *,
        cast(time_at_stake_ns as double) / step_ns as share_of_step,
        is_evaluated
        and case when fires_when = 'below' then figure < threshold else figure > threshold end
        and cast(time_at_stake_ns as double) / step_ns >= fire_share as is_fired
    from graded
),

final as (
    select
        run_id,
        iteration,
        rule_id,
        title,
        case
            when not is_evaluated then 'not_evaluated'
            when is_fired then 'fired'
            else 'passed'
        end as status,
        case
            when not is_evaluated then not_evaluated_reason
            when priced_by = 'direct' and whatif_scenario is not null
                then
                    {%- if what_if_models_built() %}
                        'priced directly: fct_what_if has no ' || whatif_scenario
                        || ' row for this iteration'
                    {%- else %}
                        'priced directly: the what-if models were left out of this build'
                        || ' (var whatif false, or the spark target), so fct_what_if has no '
                        || whatif_scenario || ' row'
                    {%- endif %}
        end as reason,
        case
            when not is_fired then null
            when share_of_step >= high_share then 'high'
            when share_of_step >= medium_share then 'medium'
            else 'low'
        end as severity,
        case
            when is_fired
                then cast(row_number() over (
                    partition by run_id, iteration, is_fired
                    order by time_at_stake_ns desc, rule_id asc
                ) as bigint)
        end as finding_rank,
        subject,
        step_ns,
        time_at_stake_ns,
        share_of_step,
        priced_by,
        evidence_mart,
        evidence_rank,
        evidence_pp_group_index,
        figure_name,
        figure,
        fires_when,
        threshold,
        baseline_name,
        baseline,
        history,
        recommendation,
        megatron_flags,
        doc_reference,
        shown_in
    from fired
)

select * from final
