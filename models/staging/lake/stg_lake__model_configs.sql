{#
    One row per model/batch configuration file of a run (model_config*.json):
    key (run_id, trace_id), trace_id being the file's id. Not a trace: each
    file lands by one rename, so there is no commit marker to filter on.
#}

with

lake_model_configs as (
    select * from {{ lake_source('model_configs') }}
),

renamed as (
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
        micro_batch_size,
        swiglu,
        group_query_attention,
        params_dtype,
        stated_flops_per_iteration,
        config_source,
        config,
        path,
        content_hash,
        size_bytes,
        mtime_ns,
        ingested_at
    from lake_model_configs
)

select * from renamed
