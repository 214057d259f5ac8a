{#
    One row per step window of a trace (trace_id, slice_id: the slice that
    opens it): the iteration N and its time window on the CPU clock. The
    one place a trace's steps are read, by the first rule that has them
    (step_rule):
    - `profiler_step`: the `ProfilerStep#N` ranges (ingest marks every
      complete CPU slice named so as an annotation range, whatever its
      category: ingest/annotation_context.py; so they are read from
      int_annotation_ranges_nested, a few rows per trace, not from the
      lake's every slice), N from the name;
    - `nvtx_marker`, an Nsight trace without them: nsys-ai's iteration
      marker ranges on its primary launch thread
      (int_nsys_iterations_windowed), N counted from 0;
    - `gap_rule`, an Nsight trace without either: nsys-ai's gap rule, when
      every GPU of its export file finds the same number of iterations
      (int_nsys_iterations_windowed.is_consistent). The rule is nsys-ai's on
      the GPU timeline, so a window has GPU bounds too (gpu_ts_ns,
      gpu_window_end_ns: from the iteration's first kernel start to the
      next's) that place GPU work by its own start, launched or not; on the
      CPU it opens at the iteration's first launch on the primary thread.
      The first window opens at the trace's start and the last closes at
      its end, so every slice of the trace lies in one.
    A trace without any has no row: it is one iteration
    (int_slices_contextualized). ts_ns/end_ns: the range (a gap-rule window:
    the window); window_end_ns: the range cut at the next window's start,
    what int_slices_contextualized places CPU slices and launched GPU work
    in (GPU work by its launch's start; a slice in no window is outside the
    steps); gpu_ts_ns/gpu_window_end_ns: see `gap_rule`, NULL otherwise.
    Per trace (materialized per_trace): keyed by
    trace_id.
#}

{#- The traces to compute, read once for every scan (macros/per_trace.sql). -#}
{%- set pending = traces_pending() %}
{%- set new_traces = trace_filter(pending) %}

with

{# The prefix is a literal: a `%` or `_` in var('profiler_step_prefix')
   would be a LIKE wildcard, which the regular expression after it then
   narrows again. #}
profiler_steps as (
    select
        trace_id,
        slice_id,
        'profiler_step' as step_rule,
        cast(
            substring(name, {{ var('profiler_step_prefix') | length + 1 }}) as bigint
        ) as step_number,
        ts_ns,
        end_ns,
        cast(null as bigint) as gpu_ts_ns,
        cast(null as bigint) as gpu_window_end_ns
    from {{ ref('int_annotation_ranges_nested') }}
    where
        name like '{{ var('profiler_step_prefix') | replace("'", "''") }}%'
        and {{ regex_matches('name', "'^" ~ var('profiler_step_prefix') ~ "[0-9]+$'") }}
        and {{ new_traces }}
),

traces as (
    select
        trace_id,
        trace_start_ns,
        trace_end_ns
    from {{ ref('int_traces_loaded') }}
    where {{ new_traces }}
),

nsys_iterations as (
    select
        trace_id,
        opening_slice_id as slice_id,
        case when is_heuristic then 'gap_rule' else 'nvtx_marker' end as step_rule,
        iteration as step_number,
        cpu_start_ns,
        cpu_end_ns,
        gpu_start_ns,
        gpu_end_ns,
        is_heuristic
    from {{ ref('int_nsys_iterations_windowed') }}
    where
        is_consistent
        and {{ new_traces }}
        and trace_id not in (select profiler_steps.trace_id from profiler_steps)
),

{# Gap-rule windows tile the trace on both clocks: from the first launch
   (kernel start) of one iteration to that of the next, the first from the
   trace's start, the last to its end. #}
nsys_windows as (
    select
        nsys_iterations.trace_id,
        nsys_iterations.slice_id,
        nsys_iterations.step_rule,
        nsys_iterations.step_number,
        case
            when nsys_iterations.is_heuristic and nsys_iterations.step_number = 0
                then least(nsys_iterations.cpu_start_ns, traces.trace_start_ns)
            else nsys_iterations.cpu_start_ns
        end as ts_ns,
        case
            when nsys_iterations.is_heuristic
                then coalesce(
                    lead(nsys_iterations.cpu_start_ns) over (
                        partition by nsys_iterations.trace_id
                        order by nsys_iterations.step_number
                    ),
                    greatest(nsys_iterations.cpu_end_ns, traces.trace_end_ns) + 1
                )
            else nsys_iterations.cpu_end_ns
        end as end_ns,
        case
            when nsys_iterations.is_heuristic and nsys_iterations.step_number = 0
                then least(nsys_iterations.gpu_start_ns, traces.trace_start_ns)
            when nsys_iterations.is_heuristic then nsys_iterations.gpu_start_ns
        end as gpu_ts_ns,
        case
            when nsys_iterations.is_heuristic
                then coalesce(
                    lead(nsys_iterations.gpu_start_ns) over (
                        partition by nsys_iterations.trace_id
                        order by nsys_iterations.step_number
                    ),
                    greatest(nsys_iterations.gpu_end_ns, traces.trace_end_ns) + 1
                )
        end as gpu_window_end_ns
    from nsys_iterations
    inner join traces
        on nsys_iterations.trace_id = traces.trace_id
),

windows as (
    select * from profiler_steps
    union all
    select * from nsys_windows
),

final as (
    select
        trace_id,
        slice_id,
        step_rule,
        step_number,
        ts_ns,
        end_ns,
        least(
            end_ns,
            coalesce(
                lead(ts_ns) over (partition by trace_id order by ts_ns, slice_id),
                end_ns
            )
        ) as window_end_ns,
        gpu_ts_ns,
        gpu_window_end_ns
    from windows
)

select * from final
