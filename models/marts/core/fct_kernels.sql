{#
    One row per GPU kernel, copy or fill: run x rank x kernel, with phase,
    microbatch, vpp chunk, microbatch within the chunk and communication
    group from int_kernels_phased.
    Incremental by trace (macros/incremental_traces.sql): a build computes
    the kernels of new traces, and of traces whose int_kernels_phased rows
    were recomputed for a changed run context (the context_hash that
    int_kernels_phased's ledger keeps differs from the one this model's
    ledger kept at its last build), and deletes those of unloaded ones.
#}

{#- The run context int_kernels_phased's rows of each trace were computed
    with: the context_hash its ledger keeps. -#}
{%- set trace_context = "select trace_id, context_hash from {{ ref('int_kernels_phased')"
    ~ ".incorporate(path={'identifier': 'int_kernels_phased__traces'}) }}" -%}

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
        category,
        name,
        kind,
        device,
        stream,
        correlation,
        process_group_desc,
        launch_slice_id,
        launch_source,
        launch_name,
        iteration,
        is_outside_steps,
        ts_ns,
        dur_ns,
        end_ns
    from {{ ref('int_kernels_launched') }}
    where {{ incremental_traces_where('trace') }}
),

phases as (
    select
        trace_id,
        slice_id,
        phase,
        microbatch,
        vpp_chunk,
        chunk_microbatch,
        comm_group_kind,
        comm_group_source,
        comm_process_group_kind,
        comm_group_index
    from {{ ref('int_kernels_phased') }}
    where {{ incremental_traces_where('trace') }}
),

final as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.name,
        kernels.category,
        kernels.kind,
        phases.phase,
        phases.comm_group_kind,
        phases.comm_group_source,
        phases.comm_process_group_kind,
        phases.comm_group_index,
        kernels.iteration,
        phases.microbatch,
        phases.vpp_chunk,
        phases.chunk_microbatch,
        kernels.is_outside_steps,
        kernels.device,
        kernels.stream,
        kernels.correlation,
        kernels.process_group_desc,
        kernels.launch_slice_id,
        kernels.launch_source,
        kernels.launch_name,
        kernels.ts_ns,
        kernels.dur_ns,
        kernels.end_ns
    from kernels
    left join phases
        on
            kernels.trace_id = phases.trace_id
            and kernels.slice_id = phases.slice_id
)

select * from final
