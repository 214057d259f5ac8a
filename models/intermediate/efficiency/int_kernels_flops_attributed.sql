{#
    One row per launched GPU kernel, copy or fill of a trace recorded with
    shapes (trace_id, slice_id): the FLOPs and bytes of the CPU op that
    launched it, from the op's recorded shapes (Kineto `record_shapes`), or
    NULL with the reason.

    The op is the innermost CPU op around the launch (the runtime call's
    parent slice), so an `aten::linear` is counted by the `aten::addmm` or
    `aten::mm` it runs and nothing twice. An op that launched several
    kernels shares its FLOPs and bytes among them in proportion to their
    durations, so that each kernel's rate is the op's and the sums are the
    op's. Which ops have a model, and where their operands sit, is the seed
    op_flop_models; the formulas are macros/op_flops.sql (TraceLens' perf
    models restated), applied once per distinct (op, shapes, dtypes,
    concrete inputs), not per row.

    Only the traces recorded with shapes (int_traces_loaded.has_op_shapes, from
    Kineto's `record_shapes`) have rows: their kernels, launches and CPU ops
    are the only files it reads. A kernel of any other trace has no row, and
    fct_kernels says `no_shapes` for it, so a lake without shapes costs this
    model a directory listing: on a 256-rank x 2-iteration simulated lake it
    took 4.6-5.7 s of a single-thread build with a row per kernel of every
    trace and the ops' args read, 1.0-1.7 s with only the shaped traces'
    ops read, and nothing now.

    null_reason: `no_cpu_op` (the launch is not inside a CPU op),
    `no_shapes` (the op has no `Input Dims`), `unmodelled_op` (no row in
    op_flop_models), `no_causal_flag` (attention without its is_causal
    input), `bad_shapes` (the dims do not fit the model, or a
    convolution's stride, padding, ... are not in `Concrete Inputs`),
    `helper_of_op` (a copy or fill of an op whose work its kernels do, e.g.
    a GEMM's workspace memset).

    Per trace (materialized per_trace): keyed by trace_id.
#}

{#- The traces to compute: on an incremental run the pending ones with shapes. #}
{%- set shaped = traces_pending(where='loaded.has_op_shapes') %}
{%- set shaped_traces = trace_filter(shaped) %}
{#- Inputs, and dims per input, read from `Input Dims` (macros/op_flops.sql reads as many). #}
{%- set shape_inputs = 4 %}
{%- set shape_dims = 6 %}

with

kernels as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        category,
        launch_slice_id,
        dur_ns
    from {{ lake_scan('slices', shaped) }}
    where
        category in (
            {%- for category in var('kernel_categories') %}
                '{{ category }}'{{ "," if not loop.last }}
            {%- endfor %}
        )
        and launch_slice_id is not null
        and {{ shaped_traces }}
),

launches as (
    select
        trace_id,
        slice_id,
        parent_id
    from {{ lake_scan('slices', shaped) }}
    where
        category in ('cuda_runtime', 'cuda_driver')
        and parent_id is not null
        and {{ shaped_traces }}
),

ops as (
    select
        trace_id,
        slice_id,
        name,
        args
    from {{ lake_scan('slices', shaped) }}
    where category = 'cpu_op' and {{ shaped_traces }}
),

op_models as (
    select
        op_name,
        flop_model,
        q_input,
        layout,
        causal_input,
        read_inputs,
        bias_input,
        stride_input,
        padding_input,
        dilation_input,
        transposed_input,
        output_padding_input,
        groups_input,
        mask_input
    from {{ ref('op_flop_models') }}
),

dtype_sizes as (
    select
        dtype,
        size_bytes
    from {{ ref('dtype_sizes') }}
),

{# The op around each launch, with its shapes as text (the key of the
   distinct shapes below). #}
launching_ops as (
    select distinct
        ops.trace_id,
        ops.slice_id,
        ops.name as op_name,
        {{ json_text('ops.args', 'Input Dims') }} as input_dims,
        {{ json_text('ops.args', 'Input type') }} as input_types,
        {{ json_text('ops.args', 'Concrete Inputs') }} as concrete_inputs
    from launches
    inner join ops
        on
            launches.trace_id = ops.trace_id
            and launches.parent_id = ops.slice_id
),

distinct_shapes as (
    select distinct
        launching_ops.op_name,
        launching_ops.input_dims,
        launching_ops.input_types,
        launching_ops.concrete_inputs,
        op_models.flop_model,
        op_models.q_input,
        op_models.layout,
        op_models.causal_input,
        op_models.read_inputs,
        op_models.bias_input,
        op_models.stride_input,
        op_models.padding_input,
        op_models.dilation_input,
        op_models.transposed_input,
        op_models.output_padding_input,
        op_models.groups_input,
        op_models.mask_input,
        {#- The shapes as one args object again, for json_text. #}
        '{"Input Dims": ' || coalesce(launching_ops.input_dims, 'null')
        || ', "Input type": ' || coalesce(launching_ops.input_types, 'null')
        || ', "Concrete Inputs": ' || coalesce(launching_ops.concrete_inputs, 'null')
        || '}' as shape_args
    from launching_ops
    inner join op_models
        on launching_ops.op_name = op_models.op_name
    where launching_ops.input_dims is not null
),

shape_dims as (
    select
        *,
        {%- for input in range(shape_inputs) %}
            {%- for dim in range(shape_dims) %}
                {{ input_dim('shape_args', input, dim) }} as a{{ input }}_d{{ dim }},
            {%- endfor %}
            lower({{ json_text('shape_args', 'Input type', [input]) }}) as a{{ input }}_type,
        {%- endfor %}
        lower({{ concrete_input('causal_input') }}) as causal_text,
        {#- addmm/baddbmm(self, a, b, beta, alpha): beta 0 reads no C and adds nothing
            (Megatron's unfused attention scores are baddbmm with beta 0). #}
        coalesce(
            {{ json_text('shape_args', 'Concrete Inputs', [3]) }} in ('0', '0.', '0.0'), false
        ) as beta_is_zero,
        {{ conv_args() }}
    from distinct_shapes
),

shape_sizes as (
    select
        *,
        {%- for input in range(shape_inputs) %}
            {{ input_rank(input) }} as a{{ input }}_rank,
        {%- endfor %}
        {%- for input in range(shape_inputs - 1) %}
            {{ input_numel(input) }} as a{{ input }}_numel,
        {%- endfor %}
        {{ input_numel(shape_inputs - 1) }} as a{{ shape_inputs - 1 }}_numel
    from shape_dims
),

{# Bytes per element of each input; NULL for a non-tensor (Scalar, empty). #}
shape_bytes as (
    select
        shape_sizes.*,
        {%- for input in range(shape_inputs - 1) %}
            sizes_{{ input }}.size_bytes as a{{ input }}_bpe,
        {%- endfor %}
        sizes_{{ shape_inputs - 1 }}.size_bytes as a{{ shape_inputs - 1 }}_bpe
    {#- One join per input: shape_inputs is 4. #}
    from shape_sizes
    left join dtype_sizes as sizes_0
        on shape_sizes.a0_type = sizes_0.dtype
    left join dtype_sizes as sizes_1
        on shape_sizes.a1_type = sizes_1.dtype
    left join dtype_sizes as sizes_2
        on shape_sizes.a2_type = sizes_2.dtype
    left join dtype_sizes as sizes_3
        on shape_sizes.a3_type = sizes_3.dtype
),

shape_operands as (
    select
        *,
        case
            when causal_text in ('true', '1') then true
            when causal_text in ('false', '0') then false
        end as is_causal,
        case
            when flop_model in ('addmm', 'baddbmm') then a1_bpe
            when flop_model in ('attention_backward', 'convolution_backward') then a1_bpe
            else a0_bpe
        end as operand_bpe,
        case
            when flop_model in ('addmm', 'baddbmm') then a1_type
            when flop_model in ('attention_backward', 'convolution_backward') then a1_type
            else a0_type
        end as compute_dtype,
        case
            when flop_model in ('mm', 'addmm', 'bmm', 'baddbmm', 'matmul', 'linear')
                then 'matrix'
            when flop_model in ('attention_forward', 'attention_backward') then 'matrix'
            when flop_model in ('convolution', 'convolution_transpose', 'convolution_backward')
                then 'matrix'
            else 'vector'
        end as compute_unit,
        {#- Elementwise: the output has the broadcast shape of the inputs read
            and the widest dtype among those with dims (type promotion
            ignores 0-dim numbers), else the first input's. #}
        greatest(
            {%- for input in range(shape_inputs) %}
                case
                    when read_inputs > {{ input }} and a{{ input }}_bpe is not null
                        then a{{ input }}_numel
                    else 0
                end{{ "," if not loop.last }}
            {%- endfor %}
        ) as output_numel,
        coalesce(nullif(greatest(
            {%- for input in range(shape_inputs) %}
                case
                    when read_inputs > {{ input }} and a{{ input }}_rank >= 1
                        then coalesce(a{{ input }}_bpe, 0)
                    else 0
                end{{ "," if not loop.last }}
            {%- endfor %}
        ), 0), a0_bpe) as output_bpe,
        case
            when a2_bpe is not null and a2_rank >= 1 then a2_numel
            else {{ dim_from_right(0, 1) }}
        end as norm_channels,
        {{ gemm_sizes() }},
        {{ attention_sizes() }},
        {{ conv_sizes() }}
    from shape_bytes
),

shape_costs as (
    select
        op_name,
        input_dims,
        input_types,
        concrete_inputs,
        flop_model,
        compute_dtype,
        compute_unit,
        {#- A convolution whose stride, padding, ... are not readable has no size. #}
        case
            when flop_model not like 'convolution%' or has_conv_args then {{ op_flops() }}
        end as op_flops,
        case
            when flop_model not like 'convolution%' or has_conv_args then {{ op_bytes() }}
        end as op_bytes,
        flop_model in ('attention_forward', 'attention_backward') and is_causal is null
            as lacks_causal_flag
    from shape_operands
),

op_costs as (
    select
        launching_ops.trace_id,
        launching_ops.slice_id,
        launching_ops.op_name,
        shape_costs.flop_model,
        shape_costs.compute_dtype,
        shape_costs.compute_unit,
        case when not shape_costs.lacks_causal_flag then shape_costs.op_flops end as op_flops,
        case when not shape_costs.lacks_causal_flag then shape_costs.op_bytes end as op_bytes,
        case
            when launching_ops.input_dims is null then 'no_shapes'
            when op_models.op_name is null then 'unmodelled_op'
            when shape_costs.lacks_causal_flag then 'no_causal_flag'
            when shape_costs.op_flops is null then 'bad_shapes'
        end as null_reason
    from launching_ops
    left join op_models
        on launching_ops.op_name = op_models.op_name
    left join shape_costs
        on
            launching_ops.op_name = shape_costs.op_name
            and launching_ops.input_dims = shape_costs.input_dims
            and launching_ops.input_types is not distinct from shape_costs.input_types
            and launching_ops.concrete_inputs is not distinct from shape_costs.concrete_inputs
),

kernel_ops as (
    select
        kernels.run_id,
        kernels.rank,
        kernels.trace_id,
        kernels.slice_id,
        kernels.dur_ns,
        op_costs.slice_id as op_slice_id,
        op_costs.op_name,
        op_costs.flop_model,
        op_costs.compute_dtype,
        op_costs.compute_unit,
        op_costs.op_flops,
        op_costs.op_bytes,
        coalesce(
            op_costs.null_reason,
            case when op_costs.slice_id is null then 'no_cpu_op' end
        ) as null_reason,
        {#- Only an op that moves data (copy_, fill_) does its work in copies and
            fills: a GEMM's cuBLAS workspace memset gets none of its FLOPs. #}
        kernels.category = 'kernel'
        or op_costs.flop_model = 'fill'
        or op_costs.op_name = 'aten::copy_' as is_sharing
    from kernels
    left join launches
        on
            kernels.trace_id = launches.trace_id
            and kernels.launch_slice_id = launches.slice_id
    left join op_costs
        on
            launches.trace_id = op_costs.trace_id
            and launches.parent_id = op_costs.slice_id
),

sharing as (
    select
        *,
        sum(case when is_sharing then dur_ns end) over (
            partition by trace_id, op_slice_id
        ) as op_kernel_ns,
        sum(case when is_sharing then 1 else 0 end) over (
            partition by trace_id, op_slice_id
        ) as op_kernel_count
    from kernel_ops
),

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        op_slice_id,
        op_name,
        flop_model,
        compute_dtype,
        compute_unit,
        {#- The op's share by duration (by count when its kernels took no time). #}
        case when is_sharing then op_flops * coalesce(
            cast(dur_ns as double) / nullif(op_kernel_ns, 0), 1.0 / op_kernel_count
        ) end as flops,
        case when is_sharing then op_bytes * coalesce(
            cast(dur_ns as double) / nullif(op_kernel_ns, 0), 1.0 / op_kernel_count
        ) end as bytes,
        op_flops,
        op_bytes,
        op_kernel_count,
        case
            when null_reason is not null then null_reason
            when not is_sharing then 'helper_of_op'
        end as null_reason
    from sharing
)

select * from final
