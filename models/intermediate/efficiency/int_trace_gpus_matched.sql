{#
    One row per loaded trace (trace_id): the GPU product its kernels ran on
    and that product's peaks (seed gpu_peaks), the roofs every efficiency
    figure is measured against.

    The GPU comes from the trace's device list (`deviceProperties` in
    Kineto; ingest writes Nsight's TARGET_INFO_GPU in the same shape): the
    name of the device with the lowest position in the list, normalised as
    nsys-ai does (lower case, `nvidia` dropped, `-` as a space) and matched
    against the seed's `name_pattern`s, lowest priority first. A trace that
    lists several different names is flagged (has_mixed_gpus) and keeps the
    first. var('gpu_product'), when set, names the product of every trace
    (a row of the seed), for traces without a device list (the sampled
    128-rank job) or a GPU the patterns miss.

    A plain table rebuilt every build: one row per trace, and the var and
    the seed apply at once without a full refresh of the per-trace models.
#}

{#- var('gpu_product') as a SQL literal (null when unset). -#}
{%- set forced_product = var('gpu_product') %}
{%- set forced_product_sql = 'null' if forced_product is none
    else "'" ~ (forced_product | replace("'", "''")) ~ "'" %}

with

traces as (
    select
        run_id,
        trace_id,
        rank,
        device_properties
    from {{ ref('int_traces_loaded') }}
),

peaks as (
    select
        gpu_product,
        priority,
        name_pattern,
        fp32_vector_tflops,
        fp32_matrix_tflops,
        tf32_tflops,
        bf16_tflops,
        fp16_tflops,
        fp8_tflops,
        hbm_tbps
    from {{ ref('gpu_peaks') }}
),

{# A job's ranks list the same devices, so each distinct list is parsed
   once, not once per trace. #}
device_lists as (
    select distinct device_properties
    from traces
    where device_properties is not null
),

{# Kineto lists every visible device; 16 positions cover an 8- or 16-GPU host. #}
devices as (
    {%- for position in range(16) %}
        select
            device_properties,
            {{ position }} as device_position,
            {{ json_item_text('device_properties', position, 'name') }} as gpu_name,
            try_cast(
                {{ json_item_text('device_properties', position, 'numSms') }} as bigint
            ) as gpu_sm_count,
            try_cast(
                {{ json_item_text('device_properties', position, 'totalGlobalMem') }} as bigint
            ) as gpu_memory_bytes
        from device_lists
        where {{ json_item_text('device_properties', position, 'name') }} is not null
        {{- "\n        union all" if not loop.last }}
    {%- endfor %}
),

first_devices as (
    select
        device_properties,
        min(device_position) as device_position,
        count(distinct gpu_name) as gpu_name_count
    from devices
    group by 1
),

{# Each device list's first GPU, its name normalised as nsys-ai does. #}
listed as (
    select
        devices.device_properties,
        devices.gpu_name,
        devices.gpu_sm_count,
        devices.gpu_memory_bytes,
        first_devices.gpu_name_count > 1 as has_mixed_gpus,
        trim(replace(replace(lower(devices.gpu_name), 'nvidia', ''), '-', ' '))
            as normalized_name
    from first_devices
    inner join devices
        on
            first_devices.device_properties = devices.device_properties
            and first_devices.device_position = devices.device_position
),

{# The best (lowest priority) pattern matching each list's GPU name. #}
name_matches as (
    select
        listed.device_properties,
        peaks.gpu_product,
        row_number() over (
            partition by listed.device_properties order by peaks.priority, peaks.gpu_product
        ) as match_order
    from listed
    inner join peaks
        on {{ regex_matches('listed.normalized_name', 'peaks.name_pattern') }}
),

named as (
    select
        traces.run_id,
        traces.trace_id,
        traces.rank,
        listed.gpu_name,
        listed.gpu_sm_count,
        listed.gpu_memory_bytes,
        coalesce(listed.has_mixed_gpus, false) as has_mixed_gpus,
        name_matches.gpu_product as matched_product
    from traces
    left join listed
        on traces.device_properties = listed.device_properties
    left join name_matches
        on
            listed.device_properties = name_matches.device_properties
            and name_matches.match_order = 1
),

matched as (
    select
        *,
        coalesce({{ forced_product_sql }}, matched_product) as gpu_product,
        case
            when {{ forced_product_sql }} is not null then 'var'
            when matched_product is not null then 'device_name'
        end as gpu_match_source
    from named
),

final as (
    select
        matched.run_id,
        matched.trace_id,
        matched.rank,
        matched.gpu_name,
        matched.gpu_sm_count,
        matched.gpu_memory_bytes,
        matched.has_mixed_gpus,
        peaks.gpu_product,
        matched.gpu_match_source,
        peaks.fp32_vector_tflops,
        peaks.fp32_matrix_tflops,
        peaks.tf32_tflops,
        peaks.bf16_tflops,
        peaks.fp16_tflops,
        peaks.fp8_tflops,
        peaks.hbm_tbps
    from matched
    left join peaks
        on matched.gpu_product = peaks.gpu_product
)

select * from final
