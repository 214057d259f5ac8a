{#
    One row per GPU kernel, copy or fill (trace_id, slice_id) with its
    training phase and microbatch.

    A kernel takes the phase of the Megatron step frames around its CPU
    launch: frames on the launch's own thread whose time holds the launch,
    plus the time windows of backward steps on any thread of the trace
    (autograd runs backward on its own thread, outside the schedule's
    backward_step frame). Among them the lowest seed priority wins
    (recompute > pp_p2p > dp_sync > optimizer > forward > backward), so no
    kernel is counted in two phases; none means `other`. The microbatch is
    that of the outermost forward/backward step found the same way.

    Communication group (communication kernels only). The exact group, when
    the kernel names it (`Process Group Ranks`, `Process Group Name`) and
    dim_process_groups has it: same ranks (else, without ranks, same pg
    name with the kernel's rank a member); among groups with the same ranks
    (tp, etp, tp_cp, ... often coincide) the one whose pg_desc, then pg_name,
    also matches. comm_group_kind: the `process_group_kinds` seed on the
    kernel's `Process Group Description`, else the matched group's kind,
    else the comm_group_kind of the winning step pattern (seed
    megatron_step_patterns); comm_group_source says which.
    Incremental by trace (macros/incremental_traces.sql): a build computes
    the kernels of new traces, and of traces whose run context changed, and
    deletes those of unloaded ones. A kernel's row depends on its own trace
    and on a run context that other traces and topology files can change:
    the run's dim_process_groups and the trace's chunks
    (int_microbatch_steps_chunked, which reads dim_ranks and the topology).
    So a build hashes that context per trace (`trace_context` below), marks
    the traces whose hash differs from the one their rows were computed with
    (column context_hash, which the post-hooks add to the ledger
    `<model>__traces`) as new in `<model>__changes`, and recomputes them too.
    fct_kernels and fct_microbatch_phases compare this ledger's context_hash
    with their own to do the same.
#}

{#- The run context of each trace's rows (see above): hashes of the run's
    process groups and of the trace's chunks. -#}
{%- set trace_context = "with groups as ("
    ~ " select run_id, md5(string_agg(cast((group_kind, group_index, kind, ranks_key,"
    ~ " pg_name, pg_desc) as varchar), ';' order by group_kind, group_index, ranks_key))"
    ~ " as groups_hash"
    ~ " from {{ ref('dim_process_groups') }} group by run_id),"
    ~ " chunks as ("
    ~ " select trace_id, md5(string_agg(cast((slice_id, vpp_chunk, chunk_microbatch)"
    ~ " as varchar), ';' order by slice_id)) as chunks_hash"
    ~ " from {{ ref('int_microbatch_steps_chunked') }} group by trace_id)"
    ~ " select traces.trace_id, md5(coalesce(groups.groups_hash, '-') || '/'"
    ~ " || coalesce(chunks.chunks_hash, '-')) as context_hash"
    ~ " from {{ ref('stg_lake__traces') }} as traces"
    ~ " left join groups on traces.run_id = groups.run_id"
    ~ " left join chunks on traces.trace_id = chunks.trace_id" -%}

{{ config(
    materialized='incremental',
    incremental_strategy='append',
    on_schema_change='sync_all_columns',
    pre_hook=[
        "{{ incremental_traces_prepare() }}",
        "{% if incremental_traces_mode() == 'incremental' %}"
        ~ " insert into {{ incremental_traces_changed() }}"
        ~ " (trace_id, run_id, rank, change, has_steps, first_iteration, last_iteration)"
        ~ " select traces.trace_id, traces.run_id, traces.rank, 'new',"
        ~ " traces.min_profiler_step is not null,"
        ~ " coalesce(traces.min_profiler_step, traces.iteration, {{ var('default_iteration') }}),"
        ~ " coalesce(traces.max_profiler_step, traces.iteration, {{ var('default_iteration') }})"
        ~ " from {{ ref('stg_lake__traces') }} as traces"
        ~ " inner join (" ~ trace_context ~ ") as now_context on traces.trace_id = now_context.trace_id"
        ~ " left join {{ incremental_traces_ledger() }} as built_context"
        ~ " on traces.trace_id = built_context.trace_id"
        ~ " where built_context.context_hash is distinct from now_context.context_hash"
        ~ " and traces.trace_id not in (select changed.trace_id"
        ~ " from {{ incremental_traces_changed() }} as changed)"
        ~ "{% else %} select 1 as no_context_change{% endif %}",
        "{{ incremental_traces_delete('trace') }}",
    ],
    post_hook=[
        "{{ incremental_traces_record() }}",
        "alter table {{ incremental_traces_ledger() }} add column context_hash varchar",
        "update {{ incremental_traces_ledger() }} as ledger"
        ~ " set context_hash = now_context.context_hash"
        ~ " from (" ~ trace_context ~ ") as now_context"
        ~ " where ledger.trace_id = now_context.trace_id",
    ],
) }}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        kind,
        process_group_desc,
        launch_track_id,
        launch_ts_ns
    from {{ ref('int_kernels_launched') }}
    where {{ incremental_traces_where('trace') }}
),

pg_slices as (
    select
        trace_id,
        slice_id,
        process_group_name,
        process_group_ranks
    from {{ ref('stg_lake__slices') }}
    where
        (process_group_name is not null or process_group_ranks is not null)
        and {{ incremental_traces_where('trace') }}
),

process_groups as (
    select
        run_id,
        group_kind,
        group_index,
        kind,
        ranks,
        ranks_key,
        pg_name,
        pg_desc
    from {{ ref('dim_process_groups') }}
),

group_patterns as (
    select
        pattern_id,
        priority,
        group_kind,
        pattern
    from {{ ref('process_group_kinds') }}
),

group_descs as (
    select distinct process_group_desc
    from kernels
    where kind = 'communication' and process_group_desc is not null
),

group_desc_kinds as (
    select
        process_group_desc,
        group_kind
    from (
        select
            group_descs.process_group_desc,
            group_patterns.group_kind,
            row_number() over (
                partition by group_descs.process_group_desc
                order by group_patterns.priority, group_patterns.pattern_id
            ) as match_rank
        from group_descs
        inner join group_patterns
            on {{ regex_matches('group_descs.process_group_desc', 'group_patterns.pattern') }}
    ) as ranked
    where match_rank = 1
),

{# The process group each communication kernel names (few distinct keys). #}
kernel_groups as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.process_group_desc,
        pg_slices.process_group_name,
        case
            when pg_slices.process_group_ranks is not null
                then array_to_string(list_sort(pg_slices.process_group_ranks), ',')
        end as ranks_key
    from kernels
    inner join pg_slices
        on
            kernels.trace_id = pg_slices.trace_id
            and kernels.slice_id = pg_slices.slice_id
    where kernels.kind = 'communication'
),

group_keys as (
    select distinct
        run_id,
        rank,
        process_group_desc,
        process_group_name,
        ranks_key
    from kernel_groups
),

group_candidates as (
    select
        group_keys.*,
        process_groups.group_kind as matched_group_kind,
        process_groups.group_index as matched_group_index,
        process_groups.kind as matched_kind,
        coalesce(process_groups.pg_desc = group_keys.process_group_desc, false) as is_desc_match,
        coalesce(process_groups.pg_name = group_keys.process_group_name, false) as is_name_match
    from group_keys
    inner join process_groups
        on
            group_keys.run_id = process_groups.run_id
            and group_keys.ranks_key = process_groups.ranks_key
    union all
    select
        group_keys.*,
        process_groups.group_kind as matched_group_kind,
        process_groups.group_index as matched_group_index,
        process_groups.kind as matched_kind,
        coalesce(process_groups.pg_desc = group_keys.process_group_desc, false) as is_desc_match,
        true as is_name_match
    from group_keys
    inner join process_groups
        on
            group_keys.run_id = process_groups.run_id
            and group_keys.process_group_name = process_groups.pg_name
    where
        group_keys.ranks_key is null
        and list_contains(process_groups.ranks, group_keys.rank)
),

group_matches as (
    select *
    from (
        select
            *,
            row_number() over (
                partition by run_id, rank, process_group_desc, process_group_name, ranks_key
                order by
                    is_desc_match desc,
                    is_name_match desc,
                    matched_group_kind asc,
                    matched_group_index asc
            ) as match_rank
        from group_candidates
    ) as ranked_candidates
    where match_rank = 1
),

kernel_group_matches as (
    select
        kernel_groups.trace_id,
        kernel_groups.slice_id,
        group_matches.matched_group_kind,
        group_matches.matched_group_index,
        group_matches.matched_kind
    from kernel_groups
    inner join group_matches
        on
            kernel_groups.run_id = group_matches.run_id
            and kernel_groups.rank = group_matches.rank
            and kernel_groups.ranks_key is not distinct from group_matches.ranks_key
            and kernel_groups.process_group_desc
            is not distinct from group_matches.process_group_desc
            and kernel_groups.process_group_name
            is not distinct from group_matches.process_group_name
),

step_frames as (
    select
        trace_id,
        slice_id as step_slice_id,
        track_id,
        phase,
        pattern_id,
        is_outermost,
        microbatch,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where {{ incremental_traces_where('trace') }}
),

chunks as (
    select
        trace_id,
        slice_id as step_slice_id,
        vpp_chunk,
        chunk_microbatch
    from {{ ref('int_microbatch_steps_chunked') }}
    where {{ incremental_traces_where('trace') }}
),

patterns as (
    select
        pattern_id,
        priority,
        comm_group_kind
    from {{ ref('megatron_step_patterns') }}
),

launched as (
    select *
    from kernels
    where launch_ts_ns is not null
),

same_thread_frames as (
    select
        launched.trace_id,
        launched.slice_id,
        step_frames.phase,
        step_frames.pattern_id,
        step_frames.step_slice_id,
        step_frames.microbatch
    from launched
    inner join step_frames
        on
            launched.trace_id = step_frames.trace_id
            and launched.launch_track_id = step_frames.track_id
            and launched.launch_ts_ns >= step_frames.ts_ns
            and launched.launch_ts_ns < step_frames.end_ns
),

backward_windows as (
    select
        launched.trace_id,
        launched.slice_id,
        step_frames.phase,
        step_frames.pattern_id,
        step_frames.step_slice_id,
        step_frames.microbatch
    from launched
    inner join step_frames
        on
            launched.trace_id = step_frames.trace_id
            and launched.launch_track_id <> step_frames.track_id
            and launched.launch_ts_ns >= step_frames.ts_ns
            and launched.launch_ts_ns < step_frames.end_ns
    where step_frames.phase = 'backward' and step_frames.is_outermost
),

candidates as (
    select * from same_thread_frames
    union all
    select * from backward_windows
),

ranked as (
    select
        candidates.trace_id,
        candidates.slice_id,
        candidates.phase,
        patterns.comm_group_kind as phase_group_kind,
        row_number() over (
            partition by candidates.trace_id, candidates.slice_id
            order by patterns.priority, candidates.pattern_id
        ) as phase_rank
    from candidates
    inner join patterns
        on candidates.pattern_id = patterns.pattern_id
),

phases as (
    select
        trace_id,
        slice_id,
        phase,
        phase_group_kind
    from ranked
    where phase_rank = 1
),

{# The step that gives the kernel its microbatch: one of the winning phase first. #}
microbatch_steps as (
    select
        candidates.trace_id,
        candidates.slice_id,
        candidates.step_slice_id,
        candidates.microbatch,
        row_number() over (
            partition by candidates.trace_id, candidates.slice_id
            order by
                case when candidates.phase = phases.phase then 0 else 1 end asc,
                candidates.microbatch desc,
                candidates.step_slice_id asc
        ) as step_rank
    from candidates
    inner join phases
        on
            candidates.trace_id = phases.trace_id
            and candidates.slice_id = phases.slice_id
    where candidates.microbatch is not null
),

microbatches as (
    select
        microbatch_steps.trace_id,
        microbatch_steps.slice_id,
        microbatch_steps.microbatch,
        chunks.vpp_chunk,
        chunks.chunk_microbatch
    from microbatch_steps
    left join chunks
        on
            microbatch_steps.trace_id = chunks.trace_id
            and microbatch_steps.step_slice_id = chunks.step_slice_id
    where microbatch_steps.step_rank = 1
),

phased as (
    select
        kernels.trace_id,
        kernels.slice_id,
        kernels.kind,
        kernels.process_group_desc,
        coalesce(phases.phase, 'other') as phase,
        phases.phase_group_kind,
        microbatches.microbatch,
        microbatches.vpp_chunk,
        microbatches.chunk_microbatch
    from kernels
    left join phases
        on
            kernels.trace_id = phases.trace_id
            and kernels.slice_id = phases.slice_id
    left join microbatches
        on
            kernels.trace_id = microbatches.trace_id
            and kernels.slice_id = microbatches.slice_id
),

final as (
    select
        phased.trace_id,
        phased.slice_id,
        phased.phase,
        phased.microbatch,
        phased.vpp_chunk,
        phased.chunk_microbatch,
        case
            when phased.kind = 'communication'
                then coalesce(
                    group_desc_kinds.group_kind,
                    nullif(kernel_group_matches.matched_kind, 'other'),
                    phased.phase_group_kind
                )
        end as comm_group_kind,
        case
            when
                phased.kind = 'communication'
                and kernel_group_matches.matched_group_kind is not null
                then 'process_group'
            when phased.kind = 'communication' and group_desc_kinds.group_kind is not null
                then 'process_group_desc'
            when phased.kind = 'communication' and phased.phase_group_kind is not null
                then 'phase'
        end as comm_group_source,
        kernel_group_matches.matched_group_kind as comm_process_group_kind,
        kernel_group_matches.matched_group_index as comm_group_index
    from phased
    left join group_desc_kinds
        on phased.process_group_desc = group_desc_kinds.process_group_desc
    left join kernel_group_matches
        on
            phased.trace_id = kernel_group_matches.trace_id
            and phased.slice_id = kernel_group_matches.slice_id
)

select * from final
