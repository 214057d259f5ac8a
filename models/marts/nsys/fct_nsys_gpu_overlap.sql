{#
    One row per run x rank (one GPU of an Nsight Systems export): the
    union of its compute kernels, of its communication kernels and their
    overlap over the whole capture, which `tracehouse nsys summary` and
    `overlap` show (busy = compute + communication - overlap).
    The figures are fct_rank_iterations' span figures (HTA's, per
    iteration: int_rank_iterations_measured) summed over the rank's
    iterations, whose kernels are disjoint: the same numbers, read from the
    same model. Why a mart of its own: fct_rank_iterations joins the step
    windows (int_rank_steps_timed and the collective chain it needs),
    which the views never read and which cost a third of their build.
    tests/test_nsys_views.py checks that the two agree.
#}

with

span_figures as (
    select
        run_id,
        rank,
        compute_ns,
        communication_ns,
        overlap_ns
    from {{ ref('int_rank_iterations_measured') }}
),

final as (
    select
        run_id,
        rank,
        cast(coalesce(sum(compute_ns), 0) as bigint) as compute_ns,
        cast(coalesce(sum(communication_ns), 0) as bigint) as communication_ns,
        cast(coalesce(sum(overlap_ns), 0) as bigint) as overlap_ns
    from span_figures
    group by 1, 2
)

select * from final
