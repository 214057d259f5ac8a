{#
    One row per training iteration of each GPU of an Nsight Systems trace
    (run_id, rank, iteration), found as nsys-ai's `iters` finds them: NVTX
    marker ranges (seeds/nsys_iteration_markers.csv) on the primary launch
    thread, else the gap rule (is_heuristic). The rules are
    int_nsys_iterations_detected's, which documents them.
#}

with

final as (
    select
        run_id,
        rank,
        iteration,
        marker_name,
        is_heuristic,
        cpu_start_ns,
        cpu_end_ns,
        gpu_start_ns,
        gpu_end_ns,
        kernel_count,
        compute_ns,
        communication_ns,
        communication_kernel_count,
        gpu_span_ns
    from {{ ref('int_nsys_iterations_detected') }}
)

select * from final
