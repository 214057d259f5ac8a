{#
    One row per outermost forward or backward step of a microbatch
    (trace_id, slice_id), with its virtual-pipeline model chunk and
    Megatron's microbatch id within that chunk.

    `microbatch` (int_cpu_steps_classified) is the step's 0-based start
    order k among the rank's forward (backward) steps of the iteration: the
    virtual microbatch id of megatron-core's interleaved schedule. The chunk
    of a step comes from, in this order:
    1. `module_frame`: the model module frame the forward step runs
       (`nn.Module: GPTModel_<chunk>`, var vpp_chunk_module_pattern; the
       chunks are built, and so numbered, 0..v-1). Backward steps run in
       autograd and hold no module frame.
    2. `schedule`: megatron-core's schedule table (get_schedule_table,
       get_model_chunk_id): microbatches go in groups of
       g = microbatch_group_size_per_vp_stage (default pp size), each group
       through chunk 0..v-1, the last group taking the remainder; forward k
       is chunk (k // g) % v for full groups, backward chunks reversed
       (v - 1 - chunk).
    vpp size v: the topology file's vpp_size, else the number of distinct
    model modules the rank's forward steps ran, else 1. With v = 1 the
    chunk is NULL and chunk_microbatch = microbatch. Otherwise
    chunk_microbatch = start order of the step among the rank's steps of the
    same phase and chunk (Megatron runs each chunk's microbatches in order).
    A per-run lookup (it reads the run's topology), rebuilt each time; it
    holds microbatch steps only, so it stays small.
#}

{%- set module_pattern = var(
    'vpp_chunk_module_pattern', '^nn\\.Module: [A-Za-z0-9]*Model_([0-9]+)$'
) -%}
{%- set group_size = var('microbatch_group_size_per_vp_stage', none) %}

with

steps as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        iteration,
        phase,
        microbatch,
        ts_ns,
        end_ns
    from {{ ref('int_cpu_steps_classified') }}
    where
        is_outermost
        and phase in ('forward', 'backward')
        and microbatch is not null
),

slices as (
    select
        trace_id,
        track_id,
        name,
        ts_ns
    from {{ ref('int_slices_contextualized') }}
    where frame_kind = 'module'
),

topology as (
    select
        run_id,
        max(vpp_size) as vpp_size,
        max(pp_size) as pp_size
    from {{ ref('stg_lake__topology_groups') }}
    group by 1
),

ranks as (
    select
        run_id,
        rank,
        pp_size
    from {{ ref('int_ranks_placed') }}
),

module_frames as (
    select
        trace_id,
        track_id,
        ts_ns,
        cast(
            regexp_extract(name, '{{ module_pattern }}', 1)
            as bigint
        ) as module_chunk
    from slices
    where {{ regex_matches('name', "'" ~ module_pattern ~ "'") }}
),

{# The model module a forward step runs (NULL when it runs none or several). #}
step_modules as (
    select
        steps.trace_id,
        steps.slice_id,
        case
            when min(module_frames.module_chunk) = max(module_frames.module_chunk)
                then min(module_frames.module_chunk)
        end as module_chunk
    from steps
    inner join module_frames
        on
            steps.trace_id = module_frames.trace_id
            and steps.track_id = module_frames.track_id
            and steps.ts_ns <= module_frames.ts_ns
            and steps.end_ns > module_frames.ts_ns
    where steps.phase = 'forward'
    group by 1, 2
),

trace_modules as (
    select
        steps.trace_id,
        count(distinct step_modules.module_chunk) as module_count
    from steps
    inner join step_modules
        on
            steps.trace_id = step_modules.trace_id
            and steps.slice_id = step_modules.slice_id
    group by 1
),

sized as (
    select
        steps.*,
        step_modules.module_chunk,
        coalesce(topology.vpp_size, trace_modules.module_count, 1) as vpp_size,
        coalesce(
            {{ group_size if group_size is not none else 'cast(null as bigint)' }},
            ranks.pp_size,
            topology.pp_size
        ) as group_size,
        count(*) over (
            partition by steps.trace_id, steps.iteration, steps.phase
        ) as phase_steps
    from steps
    left join step_modules
        on
            steps.trace_id = step_modules.trace_id
            and steps.slice_id = step_modules.slice_id
    left join trace_modules
        on steps.trace_id = trace_modules.trace_id
    left join topology
        on steps.run_id = topology.run_id
    left join ranks
        on
            steps.run_id = ranks.run_id
            and steps.rank = ranks.rank
),

{# m = microbatches per chunk; full_groups = groups of g before the last one. #}
layout as (
    select
        *,
        {{ integer_divide('phase_steps', 'vpp_size') }} as chunk_microbatches,
        {% set chunk_microbatches = integer_divide('phase_steps', 'vpp_size') -%}
        greatest(
            {{ integer_divide(chunk_microbatches ~ ' + group_size - 1', 'group_size') }} - 1,
            0
        ) as full_groups
    from sized
),

scheduled as (
    select
        *,
        case
            when vpp_size > 1 and group_size > 0 and chunk_microbatches > 0
                then
                    case
                        when microbatch < full_groups * group_size * vpp_size
                            then {{ integer_divide('microbatch', 'group_size') }} % vpp_size
                        else
                            least(
                                {{ integer_divide(
                                    'microbatch - full_groups * group_size * vpp_size',
                                    'chunk_microbatches - full_groups * group_size'
                                ) }},
                                vpp_size - 1
                            )
                    end
        end as table_chunk
    from layout
),

chunked as (
    select
        *,
        case
            when vpp_size <= 1 then null
            when phase = 'forward' and module_chunk is not null then module_chunk
            when phase = 'forward' then table_chunk
            else vpp_size - 1 - table_chunk
        end as vpp_chunk,
        case
            when vpp_size <= 1 then null
            when phase = 'forward' and module_chunk is not null then 'module_frame'
            when table_chunk is not null then 'schedule'
        end as chunk_source
    from scheduled
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        iteration,
        phase,
        microbatch,
        vpp_chunk,
        case
            when vpp_size <= 1 then microbatch
            when vpp_chunk is not null
                then row_number() over (
                    partition by trace_id, iteration, phase, vpp_chunk
                    order by ts_ns
                ) - 1
        end as chunk_microbatch,
        chunk_source,
        case
            when vpp_size > 1 and phase = 'forward' then table_chunk
            when vpp_size > 1 then vpp_size - 1 - table_chunk
        end as schedule_chunk,
        vpp_size,
        group_size as microbatch_group_size,
        chunk_microbatches,
        ts_ns,
        end_ns
    from chunked
)

select * from final
