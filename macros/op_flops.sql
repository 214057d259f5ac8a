{#
    FLOPs and bytes of one CPU op from its recorded shapes (Kineto
    `record_shapes`: `Input Dims`, `Input type`, `Concrete Inputs`), the
    formulas int_kernels_flops_attributed applies once per distinct shape. They
    restate TraceLens' perf models (AMD-AGI/TraceLens
    `TraceLens/PerfModel/perf_model.py`, research/efficiency_whatif_viewer.md
    §2) in SQL:

    * GEMMs: 2·M·N·K (+ M·N for a bias), bytes (M·K + K·N + M·N)·bpe
      (+ the bias), times the batch for bmm/baddbmm/matmul (a broadcast
      matmul operand is read once: its own elements);
    * attention forward 2·B·Hq·Nq·Nkv·(d_qk + d_v), backward (flash, with the
      QKᵀ recompute) 2·B·Hq·Nq·Nkv·(3·d_qk + 2·d_v) + B·Nkv·(d_qk + d_v)·(Hq/Hkv − 1)
      (the GQA sum of dK and dV), both halved when causal;
      bytes Q + K + V + O (forward), Q + K + V + dO + dQ + dK + dV (backward);
    * elementwise: FLOPs = output elements, bytes = the tensor inputs read
      (seed column read_inputs; an `out=` tensor after them is not read)
      plus the output written (the widest dtype among the inputs with
      dims); copies and fills move bytes only;
    * convolutions (TraceLens' CONV.flops_func / bytes_func and
      flops_bwd_func, `perf_model.py`; research §2.4): forward
      2·prod(W[1:])·prod(out) (prod(x) for a transposed one; W[1] is
      C_in/groups, so groups are counted) + prod(out) for a bias, the
      output's spatial dims from stride, padding, dilation (and
      output_padding) in `Concrete Inputs`; bytes x + W + out (+ C_out for
      the bias); backward (aten::convolution_backward) the input and the
      weight gradient as its output_mask asks, each as many FLOPs as the
      forward and x + W + dout bytes (the bias gradient is the nested
      aten::sum that PyTorch launches it from, so it is that op's);
    * layer norm 6·C + 5·E, softmax 3·E (backward 6·E);
    * reductions (aten::sum): one add per input element, bytes the input
      read; the output is not counted (traces of older PyTorch do not
      record which dims are reduced, and it is at most as large as the
      input, usually far smaller); an input without a dtype (an out=
      overload's leading undefined tensor) gives no figure (bad_shapes).

    The macros read these columns of a relation of distinct shapes: a<i>_d<d> (dim d of input i), a<i>_rank, a<i>_numel,
    a<i>_bpe (bytes per element, NULL for a non-tensor input) and the
    seed op_flop_models' flop_model, q_input, layout, causal_input,
    read_inputs and the convolution arguments' positions (conv_sizes()).
#}

{#- Inputs and dims per input read from `Input Dims`. -#}
{%- macro op_shape_inputs() -%}{{ return(4) }}{%- endmacro -%}
{%- macro op_shape_dims() -%}{{ return(6) }}{%- endmacro -%}

{#- Dim `dim` of input `input` as a bigint (NULL when absent). -#}
{%- macro input_dim(args, input, dim) -%}
    try_cast({{ json_text(args, 'Input Dims', [input, dim]) }} as bigint)
{%- endmacro -%}

{#- Number of dims of input i (0 for a scalar or a non-tensor). -#}
{%- macro input_rank(input) -%}
    (
        {%- for dim in range(op_shape_dims()) %}
            case when a{{ input }}_d{{ dim }} is not null then 1 else 0 end{{ ' +' if not loop.last }}
        {%- endfor %}
    )
{%- endmacro -%}

{#- Elements of input i (1 for a scalar). -#}
{%- macro input_numel(input) -%}
    (
        {%- for dim in range(op_shape_dims()) %}
            coalesce(a{{ input }}_d{{ dim }}, 1){{ ' *' if not loop.last }}
        {%- endfor %}
    )
{%- endmacro -%}

{#- Dim j from the right (1 = last) of input i: a<i>_d<rank - j>. -#}
{%- macro dim_from_right(input, j) -%}
    case a{{ input }}_rank
        {%- for rank in range(j, op_shape_dims() + 1) %}
            when {{ rank }} then a{{ input }}_d{{ rank - j }}
        {%- endfor %}
    end
{%- endmacro -%}

{#- Dim d of the attention operand `role` (0 q, 1 k, 2 v): inputs from q_input on. -#}
{%- macro attention_dim(role, dim) -%}
    case when q_input = 1 then a{{ role + 1 }}_d{{ dim }} else a{{ role }}_d{{ dim }} end
{%- endmacro -%}

{#- Bytes of tensor input i (0 for a non-tensor). -#}
{%- macro input_bytes(input) -%}
    coalesce(a{{ input }}_numel * a{{ input }}_bpe, 0)
{%- endmacro -%}

{#- The GEMM sizes (batch, m, n, k) and whether a bias is added, per flop_model. -#}
{%- macro gemm_sizes() -%}
    case flop_model
        when 'bmm' then a0_d0
        when 'baddbmm' then a1_d0
        when 'matmul' then
            {%- for j in range(1, 5) %}
                greatest(
                    case when a0_rank - 2 - {{ j }} >= 0 then {{ dim_from_right(0, j + 2) }} else 1 end,
                    case when a1_rank - 2 - {{ j }} >= 0 then {{ dim_from_right(1, j + 2) }} else 1 end
                ){{ ' *' if not loop.last }}
            {%- endfor %}
        else 1
    end as gemm_batch,
    case flop_model
        when 'mm' then a0_d0
        when 'addmm' then a1_d0
        when 'bmm' then a0_d1
        when 'baddbmm' then a1_d1
        when 'matmul' then case when a0_rank >= 2 then {{ dim_from_right(0, 2) }} else 1 end
        when 'linear' then a0_numel / nullif({{ dim_from_right(0, 1) }}, 0)
    end as gemm_m,
    case flop_model
        when 'mm' then a1_d1
        when 'addmm' then a2_d1
        when 'bmm' then a1_d2
        when 'baddbmm' then a2_d2
        when 'matmul' then case when a1_rank >= 2 then {{ dim_from_right(1, 1) }} else 1 end
        when 'linear' then a1_d0
    end as gemm_n,
    case flop_model
        when 'mm' then a0_d1
        when 'addmm' then a1_d1
        when 'bmm' then a0_d2
        when 'baddbmm' then a1_d2
        when 'matmul' then {{ dim_from_right(0, 1) }}
        when 'linear' then {{ dim_from_right(0, 1) }}
    end as gemm_k,
    case flop_model
        when 'addmm' then case when beta_is_zero then 0 else 1 end
        when 'baddbmm' then case when beta_is_zero then 0 else 1 end
        when 'linear' then case when a2_bpe is not null and a2_rank >= 1 then 1 else 0 end
        else 0
    end as gemm_bias
{%- endmacro -%}

{#- The attention sizes, per layout (`bhnd` = SDPA's [B, H, N, d], `bnhd` = flash's [B, N, H, d]). -#}
{%- macro attention_sizes() -%}
    {{ attention_dim(0, 0) }} as attention_batch,
    case when layout = 'bhnd' then {{ attention_dim(0, 1) }} else {{ attention_dim(0, 2) }} end
        as attention_q_heads,
    case when layout = 'bhnd' then {{ attention_dim(0, 2) }} else {{ attention_dim(0, 1) }} end
        as attention_q_length,
    case when layout = 'bhnd' then {{ attention_dim(1, 1) }} else {{ attention_dim(1, 2) }} end
        as attention_kv_heads,
    case when layout = 'bhnd' then {{ attention_dim(1, 2) }} else {{ attention_dim(1, 1) }} end
        as attention_kv_length,
    {{ attention_dim(0, 3) }} as attention_qk_dim,
    {{ attention_dim(2, 3) }} as attention_v_dim
{%- endmacro -%}

{#- Concrete Inputs read, by position: every position seed op_flop_models names
    must be below it (cuDNN attention's backward keeps is_causal at 14;
    tests/test_op_flop_models_seed.py checks the seed against this number). -#}
{%- macro concrete_positions() -%}{{ return(16) }}{%- endmacro -%}

{#- The `Concrete Inputs` text at the position held in column `position_column` (NULL when that is NULL). -#}
{%- macro concrete_input(position_column) -%}
    case
        {%- for position in range(concrete_positions()) %}
            when {{ position_column }} = {{ position }}
                then {{ json_text('shape_args', 'Concrete Inputs', [position]) }}
        {%- endfor %}
    end
{%- endmacro -%}

{#- A `Concrete Inputs` list at that position (`[2, 2]`, `[True, False, True]`)
    as a JSON object '{"v": [...]}' for json_text; NULL when it is not a
    list of numbers or booleans (so no trace text reaches the JSON reader
    unchecked). -#}
{%- macro concrete_list(position_column) -%}
    case
        when {{ regex_matches('lower(' ~ concrete_input(position_column) ~ ')',
                "'^\\[ *([0-9]+|true|false)( *, *([0-9]+|true|false))* *\\]$'") }}
            then '{"v": ' || lower({{ concrete_input(position_column) }}) || '}'
    end
{%- endmacro -%}

{#- Item `item` of a list column from concrete_list(), the list's only item
    when it has one (PyTorch expands `[2]` to every spatial dim), else
    `default` (the argument is not in the op's schema). -#}
{%- macro list_item(list_column, item, default) -%}
    coalesce(
        try_cast({{ json_text(list_column, 'v', [item]) }} as bigint),
        try_cast({{ json_text(list_column, 'v', [0]) }} as bigint),
        {{ default }}
    )
{%- endmacro -%}

{#- The convolution's arguments from `Concrete Inputs`, read in shape_dims
    (they need shape_args): the int lists, the transposed flag and the
    output mask, and whether every argument its schema has was readable. -#}
{%- macro conv_args() -%}
    {{ concrete_list('stride_input') }} as conv_stride_list,
    {{ concrete_list('padding_input') }} as conv_padding_list,
    {{ concrete_list('dilation_input') }} as conv_dilation_list,
    {{ concrete_list('output_padding_input') }} as conv_output_padding_list,
    {{ concrete_list('mask_input') }} as conv_mask_list,
    try_cast({{ concrete_input('groups_input') }} as bigint) as conv_groups,
    case
        when flop_model = 'convolution_transpose' then true
        when transposed_input is null then false
        when lower({{ concrete_input('transposed_input') }}) in ('true', '1') then true
        when lower({{ concrete_input('transposed_input') }}) in ('false', '0') then false
    end as conv_transposed
{%- endmacro -%}

{#- Convolution sizes: output channels, each spatial dim of the output
    (torch.nn.Conv*d's formula; ConvTranspose*d's for a transposed one),
    the bias, the gradients a backward computes, and whether the arguments
    were all read. Forward ops: x is input 0 and W input 1 [C_out,
    C_in/groups, k...] ([C_in, C_out/groups, k...] when transposed);
    convolution_backward: dout, x, W are inputs 0, 1, 2. -#}
{%- macro conv_sizes() -%}
    case
        when conv_transposed then a1_d1 * coalesce(conv_groups, 1)
        else a1_d0
    end as conv_out_channels,
    {%- for spatial in range(3) %}
        case
            when a0_d{{ spatial + 2 }} is null then 1
            when conv_transposed
                then (a0_d{{ spatial + 2 }} - 1) * {{ list_item('conv_stride_list', spatial, 1) }}
                - 2 * {{ list_item('conv_padding_list', spatial, 0) }}
                + {{ list_item('conv_dilation_list', spatial, 1) }} * (a1_d{{ spatial + 2 }} - 1)
                + {{ list_item('conv_output_padding_list', spatial, 0) }} + 1
            else {{ integer_divide(
                'a0_d' ~ (spatial + 2) ~ ' + 2 * ' ~ list_item('conv_padding_list', spatial, 0)
                ~ ' - ' ~ list_item('conv_dilation_list', spatial, 1)
                ~ ' * (a1_d' ~ (spatial + 2) ~ ' - 1) - 1',
                list_item('conv_stride_list', spatial, 1)) }} + 1
        end as conv_out_spatial_{{ spatial }},
    {%- endfor %}
    case
        when bias_input is null then 0
        {%- for input in range(op_shape_inputs()) %}
            when bias_input = {{ input }} and a{{ input }}_bpe is not null and a{{ input }}_rank >= 1
                then 1
        {%- endfor %}
        else 0
    end as conv_bias,
    case when coalesce({{ json_text('conv_mask_list', 'v', [0]) }}, 'true') = 'true' then 1 else 0 end
    + case when coalesce({{ json_text('conv_mask_list', 'v', [1]) }}, 'true') = 'true' then 1 else 0 end
        as conv_gradients,
    conv_transposed is not null
    and (stride_input is null or conv_stride_list is not null)
    and (padding_input is null or conv_padding_list is not null)
    and (dilation_input is null or conv_dilation_list is not null)
    and (output_padding_input is null or conv_output_padding_list is not null)
    and (groups_input is null or conv_groups is not null)
    and (mask_input is null or conv_mask_list is not null) as has_conv_args
{%- endmacro -%}

{#- Elements of a forward convolution's output (columns of conv_sizes()). -#}
{%- macro conv_out_numel() -%}
    (cast(a0_d0 as double) * conv_out_channels * conv_out_spatial_0 * conv_out_spatial_1 * conv_out_spatial_2)
{%- endmacro -%}

{#- FLOPs of the op, from the columns gemm_sizes(), attention_sizes(), conv_sizes() and the inputs give. -#}
{%- macro op_flops() -%}
    case
        when flop_model in ('mm', 'addmm', 'bmm', 'baddbmm', 'matmul', 'linear')
            then cast(gemm_batch as double) * gemm_m * gemm_n * (2.0 * gemm_k + gemm_bias)
        when flop_model = 'attention_forward'
            then 2.0 * attention_batch * attention_q_heads * attention_q_length
            * attention_kv_length * (attention_qk_dim + attention_v_dim)
            * case when is_causal then 0.5 else 1.0 end
        when flop_model = 'attention_backward'
            then (
                2.0 * attention_batch * attention_q_heads * attention_q_length
                * attention_kv_length * (3 * attention_qk_dim + 2 * attention_v_dim)
                {#- dK and dV summed from the query heads onto the kv heads (GQA). #}
                + cast(attention_batch as double) * attention_kv_length
                * (attention_qk_dim + attention_v_dim)
                * ({{ integer_divide('attention_q_heads', 'attention_kv_heads') }} - 1)
            ) * case when is_causal then 0.5 else 1.0 end
        when flop_model in ('convolution', 'convolution_transpose')
            then 2.0 * {{ integer_divide('a1_numel', 'a1_d0') }}
            * case when conv_transposed then a0_numel else {{ conv_out_numel() }} end
            + conv_bias * {{ conv_out_numel() }}
        {#- dX and dW each as many multiply-adds as the forward: dout (input 0) is
            its output, x (input 1) its input. #}
        when flop_model = 'convolution_backward'
            then conv_gradients * 2.0 * {{ integer_divide('a2_numel', 'a2_d0') }}
            * case when conv_transposed then a1_numel else a0_numel end
        when flop_model = 'elementwise' and op_name = 'aten::copy_' then 0.0
        when flop_model = 'elementwise' then cast(output_numel as double)
        when flop_model = 'fill' then 0.0
        when flop_model = 'layer_norm' then 6.0 * norm_channels + 5.0 * a0_numel
        when flop_model = 'softmax' then 3.0 * a0_numel
        when flop_model = 'softmax_backward' then 6.0 * a0_numel
        when flop_model = 'reduce' and a0_bpe is not null then cast(a0_numel as double)
    end
{%- endmacro -%}

{#- Bytes the op moves at least once between memory and the GPU. -#}
{%- macro op_bytes() -%}
    case
        when flop_model = 'matmul'
            then (
                cast(a0_numel as double) + a1_numel
                + cast(gemm_batch as double) * gemm_m * gemm_n
            ) * operand_bpe
        when flop_model in ('mm', 'addmm', 'bmm', 'linear')
            then (
                cast(gemm_batch as double) * gemm_m * gemm_k
                + cast(gemm_batch as double) * gemm_k * gemm_n
                + cast(gemm_batch as double) * gemm_m * gemm_n
                + gemm_bias * gemm_n
            ) * operand_bpe
        when flop_model = 'baddbmm'
            then (
                cast(gemm_batch as double) * gemm_m * gemm_k
                + cast(gemm_batch as double) * gemm_k * gemm_n
                + cast(gemm_batch as double) * gemm_m * gemm_n
            ) * operand_bpe + case when beta_is_zero then 0 else {{ input_bytes(0) }} end
        when flop_model = 'attention_forward'
            then (
                cast(attention_batch as double) * attention_q_heads * attention_q_length
                * (attention_qk_dim + attention_v_dim)
                + cast(attention_batch as double) * attention_kv_heads * attention_kv_length
                * (attention_qk_dim + attention_v_dim)
            ) * operand_bpe
        when flop_model = 'attention_backward'
            then (
                cast(attention_batch as double) * attention_q_heads * attention_q_length
                * (2 * attention_qk_dim + attention_v_dim)
                + 2.0 * attention_batch * attention_kv_heads * attention_kv_length
                * (attention_qk_dim + attention_v_dim)
            ) * operand_bpe
        when flop_model in ('convolution', 'convolution_transpose')
            then (
                cast(a0_numel as double) + a1_numel + {{ conv_out_numel() }}
                + conv_bias * conv_out_channels
            ) * operand_bpe
        when flop_model = 'convolution_backward'
            then conv_gradients * (cast(a0_numel as double) + a1_numel + a2_numel) * operand_bpe
        when flop_model = 'elementwise' and op_name = 'aten::copy_'
            then cast({{ input_bytes(0) }} as double) + {{ input_bytes(1) }}
        when flop_model = 'elementwise'
            then cast(output_numel as double) * output_bpe
            {%- for input in range(op_shape_inputs()) %}
                + case when read_inputs > {{ input }} then {{ input_bytes(input) }} else 0 end
            {%- endfor %}
        when flop_model = 'fill' then cast({{ input_bytes(0) }} as double)
        when flop_model = 'layer_norm'
            then cast(a0_numel as double) * 2 * a0_bpe
            + (2 + 2 + case when a2_bpe is not null then 1 else 0 end
                + case when a3_bpe is not null then 1 else 0 end) * norm_channels * a0_bpe
        when flop_model = 'softmax' then 2.0 * a0_numel * a0_bpe
        {#- grad_output and output read, grad_input written. #}
        when flop_model = 'softmax_backward' then 3.0 * a0_numel * a0_bpe
        when flop_model = 'reduce' and a0_bpe is not null then cast(a0_numel as double) * a0_bpe
    end
{%- endmacro -%}

{#- The dense peak (TFLOP/s) a kernel's work is measured against: the GPU's
    (columns of int_trace_gpus_matched on `gpus`) for the op's compute unit
    (`matrix` for GEMMs and attention, `vector` otherwise) and dtype. An
    fp32 GEMM whose kernel name says it runs on TF32 tensor cores
    (var('tf32_kernel_pattern'): cuBLAS/CUTLASS `s1688`/`tf32` kernels,
    PyTorch's allow_tf32, which traces do not record) is measured against
    the TF32 peak, other fp32 GEMMs against the fp32 peak. -#}
{%- macro kernel_peak_tflops(gpus, unit, dtype, kernel_name) -%}
    case
        when {{ unit }} = 'vector' then {{ gpus }}.fp32_vector_tflops
        when {{ dtype }} like '%bfloat16%' then {{ gpus }}.bf16_tflops
        when {{ dtype }} like '%float8%' then {{ gpus }}.fp8_tflops
        when {{ dtype }} in ('half', 'c10::half', 'float16', '__half') then {{ gpus }}.fp16_tflops
        when
            {{ dtype }} in ('float', 'float32', 'c10::float')
            and {{ regex_matches(kernel_name, "'" ~ var('tf32_kernel_pattern') ~ "'") }}
            then {{ gpus }}.tf32_tflops
        when {{ dtype }} in ('float', 'float32', 'c10::float') then {{ gpus }}.fp32_matrix_tflops
    end
{%- endmacro -%}
