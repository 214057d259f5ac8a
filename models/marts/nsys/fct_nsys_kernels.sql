{#
    One row per CUDA kernel of an Nsight Systems trace (trace_id, slice_id),
    inside the capture window var('nsys_window_start_ns') ..
    var('nsys_window_end_ns') when set, with its short name, `nsys_class`
    (compute or communication) and `nccl_op`. The window and the classes are
    int_nsys_kernels_windowed's, which documents them.
#}

with

final as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        device,
        stream,
        name,
        short_name,
        nsys_class,
        nccl_op,
        correlation,
        launch_slice_id,
        ts_ns,
        dur_ns,
        end_ns,
        capture_ts_ns,
        capture_end_ns,
        base_time_ns
    from {{ ref('int_nsys_kernels_windowed') }}
)

select * from final
