{#
    One row per run with a model/batch config (model_config*.json): the
    model FLOPs of one training iteration, Megatron-LM's way
    (`num_floating_point_operations` in megatron/training/training.py,
    since its 2025-03-06 causal halving; research/efficiency_whatif_viewer.md
    §1): per token 6·h·(MLP widths) + 6·(h·(q + 2·kv) + q·h) per layer +
    6·h·V for the logits, plus 6·q per token² per layer for causal
    attention, times tokens (global batch × seq length). The constant 6 is 3
    GEMMs per weight (forward, wgrad, dgrad) × 2 FLOPs per multiply-add; no
    recompute, softmax or elementwise work is counted, as Megatron does not.

    Read from the config: the arguments Megatron's formula reads, with its
    defaults where the file leaves one out (kv_channels = h / n, FFN 4h or
    int(8h/3/64)·64 with SwiGLU, vocabulary padded to a multiple of 128 × TP,
    top-k 2, every layer MoE when experts are set). Not covered (NULL is not
    given for them; the figure is simply without them): MLA, MTP, linear
    attention, hybrid Mamba stacks, list-valued moe_layer_freq, THD packing.

    A run with several config files keeps the newest (mtime, then path).
#}

with

configs as (
    select
        run_id,
        trace_id,
        num_layers,
        hidden_size,
        num_attention_heads,
        seq_length,
        global_batch_size,
        ffn_hidden_size,
        num_query_groups,
        kv_channels,
        padded_vocab_size,
        vocab_size,
        make_vocab_size_divisible_by,
        tensor_model_parallel_size,
        num_experts,
        moe_router_topk,
        moe_ffn_hidden_size,
        moe_layer_freq,
        moe_shared_expert_intermediate_size,
        swiglu,
        group_query_attention,
        params_dtype,
        stated_flops_per_iteration,
        config_source,
        path,
        row_number() over (partition by run_id order by mtime_ns desc, path desc) as newest
    from {{ ref('stg_lake__model_configs') }}
),

{# Megatron's defaults for what the file leaves out (arguments.py, vocab_utils.py). #}
sized as (
    select
        run_id,
        trace_id as config_id,
        path as config_path,
        config_source,
        params_dtype,
        stated_flops_per_iteration,
        global_batch_size,
        seq_length,
        num_layers,
        hidden_size,
        coalesce(kv_channels, {{ integer_divide('hidden_size', 'num_attention_heads') }})
        * num_attention_heads as query_width,
        coalesce(kv_channels, {{ integer_divide('hidden_size', 'num_attention_heads') }})
        * case
            when group_query_attention then coalesce(num_query_groups, num_attention_heads)
            else num_attention_heads
        end as kv_width,
        coalesce(
            ffn_hidden_size,
            case
                when swiglu
                    then {{ integer_divide(integer_divide('8 * hidden_size', '3'), '64') }} * 64
                else 4 * hidden_size
            end
        ) as ffn_width,
        case when swiglu then 3 else 2 end as ffn_matrices,
        coalesce(
            padded_vocab_size,
            {{ integer_divide(
                'vocab_size + coalesce(make_vocab_size_divisible_by, 128)'
                ~ ' * coalesce(tensor_model_parallel_size, 1) - 1',
                'coalesce(make_vocab_size_divisible_by, 128)'
                ~ ' * coalesce(tensor_model_parallel_size, 1)') }}
            * coalesce(make_vocab_size_divisible_by, 128) * coalesce(tensor_model_parallel_size, 1)
        ) as vocab,
        case
            when num_experts is null then 0
            else {{ integer_divide(
                'num_layers + coalesce(moe_layer_freq, 1) - 1', 'coalesce(moe_layer_freq, 1)') }}
        end as moe_layers,
        coalesce(moe_router_topk, 2) as router_topk,
        moe_ffn_hidden_size,
        coalesce(moe_shared_expert_intermediate_size, 0) as shared_expert_width
    from configs
    where newest = 1
),

per_token as (
    select
        *,
        6 * hidden_size * (
            ffn_width * ffn_matrices * (num_layers - moe_layers)
            + coalesce(moe_ffn_hidden_size, ffn_width) * router_topk * ffn_matrices * moe_layers
            + shared_expert_width * ffn_matrices * moe_layers
        )
        + 6 * (hidden_size * (query_width + 2 * kv_width) + query_width * hidden_size)
        * num_layers
        + 6 * hidden_size * vocab as flops_per_token,
        6 * query_width * num_layers as flops_per_token_squared
    from sized
),

final as (
    select
        run_id,
        config_id,
        config_path,
        config_source,
        params_dtype,
        global_batch_size,
        seq_length,
        num_layers,
        hidden_size,
        query_width,
        kv_width,
        ffn_width,
        vocab,
        moe_layers,
        flops_per_token,
        flops_per_token_squared,
        {#- One sample: s tokens, s² token pairs (causal halving is in the 6·q). #}
        cast(seq_length as bigint) * flops_per_token
        + cast(seq_length as bigint) * seq_length * flops_per_token_squared as flops_per_sample,
        (
            cast(seq_length as double) * flops_per_token
            + cast(seq_length as double) * seq_length * flops_per_token_squared
        ) * global_batch_size as model_flops_per_iteration,
        stated_flops_per_iteration
    from per_token
)

select * from final
