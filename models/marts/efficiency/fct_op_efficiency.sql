{#
    One row per run x rank x iteration x phase x microbatch x launching CPU
    op name x GPU product: how well the op's compute kernels used the GPU
    (TraceLens' per-op view), ratios of sums over its kernels in
    fct_kernels. A run's figure for an op, a phase's (forward, backward,
    recompute, optimizer), a microbatch's, a pipeline stage's (pp_stage,
    the rank's coordinate from dim_ranks) or, under the interleaved
    schedule, a model chunk's (pp_stage x vpp_chunk, Megatron's virtual
    stage vpp_chunk * pp_size + pp_stage) is the ratio of this table's sums
    over its rows; fct_rank_efficiency sums them per rank and iteration.
    vpp_chunk is the microbatch step's (fct_kernels.vpp_chunk), a function
    of the microbatch, so it does not change the grain.

    Traces recorded with shapes only (int_traces_loaded.has_op_shapes): another
    trace's kernels have no FLOP model (fct_kernels.flops_null_reason
    no_shapes), and a lake of such traces pays nothing for this mart (the
    join's other side is empty, so DuckDB reads no kernel).
#}

with

shaped_traces as (
    select trace_id
    from {{ ref('int_traces_loaded') }}
    where has_op_shapes
),

kernels as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.iteration,
        kernels.phase,
        kernels.microbatch,
        kernels.vpp_chunk,
        kernels.cpu_op_name,
        kernels.gpu_product,
        kernels.flop_model,
        kernels.dur_ns,
        kernels.flops,
        kernels.bytes,
        case when kernels.flops is not null then kernels.dur_ns end as modelled_ns
    from {{ ref('fct_kernels') }} as kernels
    inner join shaped_traces
        on kernels.trace_id = shaped_traces.trace_id
    where kernels.kind = 'compute'
),

ranks as (
    select
        run_id,
        rank,
        pp_stage
    from {{ ref('dim_ranks') }}
),

per_op as (
    select
        run_id,
        rank,
        iteration,
        phase,
        microbatch,
        cpu_op_name,
        gpu_product,
        vpp_chunk,
        max(flop_model) as flop_model,
        count(*) as kernels,
        cast(sum(dur_ns) as bigint) as compute_ns,
        cast(sum(modelled_ns) as bigint) as modelled_ns,
        sum(flops) as flops,
        sum(bytes) as bytes,
        {{ efficiency_ratios('flops', 'bytes', 'modelled_ns', 'dur_ns') }}
    from kernels
    group by 1, 2, 3, 4, 5, 6, 7, 8
),

final as (
    select
        per_op.*,
        ranks.pp_stage
    from per_op
    left join ranks
        on
            per_op.run_id = ranks.run_id
            and per_op.rank = ranks.rank
)

select * from final
