{#
    sweep_step_parts(intervals, windows, partition_by): the exclusive parts
    of every step window, one definition for GPU and CPU timing.

    `intervals`: partition columns, timing_source, kind, start_ns, end_ns;
    kind among compute, communication, memory, optimizer (they may overlap,
    also within a kind). `windows`: partition columns, timing_source,
    window_number, start_ns, end_ns: non-overlapping step windows numbered
    in time order within each partition and timing source.

    Every interval and window start and end is a boundary; between two
    boundaries the set of open kinds is constant, and the segment goes to
    exactly one part by priority, so the parts of a window add up to its
    length exactly, whatever overlaps whatever:
      GPU timing (kernels run concurrently, communication can hide):
        compute and communication open  -> step_overlap_ns
        compute open                    -> step_compute_ns
        communication open              -> step_exposed_communication_ns
        memory open                     -> step_exposed_memory_ns
        nothing open                    -> step_idle_ns
      CPU timing (one host thread blocks on what it calls, so a frame
      nested in another is where the time goes): communication frames,
      then optimizer, then forward/backward/recompute compute frames, else
      step_idle_ns. Megatron nests communication frames (P2P, grad sync)
      inside compute and optimizer frames and never the reverse, so the
      priority picks the innermost classified frame.
    Several boundaries at one instant are grouped into one row, so the
    order of ties never matters. The five open counts (four kinds and the
    window) ride in one running sum (macros/packed_counts.sql): one
    windowed sum instead of five. Returns partition columns, timing_source,
    window_number and the six parts (a window with no segment gets no row:
    callers coalesce to 0).
#}
{% macro sweep_step_parts(intervals, windows, partition_by) -%}
    {%- set partition = (partition_by + ['timing_source']) | join(', ') -%}
    {%- set lanes = ['compute', 'communication', 'memory', 'optimizer', 'window'] -%}
    {%- set columns -%}
        {% for column in partition_by -%}
            {{ column }},
        {% endfor -%}
        timing_source,
    {%- endset -%}
    select
        {{ columns }}
        window_number,
        {% for part in [
            ('compute', 'step_compute_ns'),
            ('overlap', 'step_overlap_ns'),
            ('communication', 'step_exposed_communication_ns'),
            ('memory', 'step_exposed_memory_ns'),
            ('optimizer', 'step_optimizer_ns'),
            ('idle', 'step_idle_ns'),
        ] -%}
            sum(case
                when part = '{{ part[0] }}' then next_at_ns - at_ns else 0
            end) as {{ part[1] }}{{ ',' if not loop.last }}
        {% endfor -%}
    from (
        select
            {{ columns }}
            at_ns,
            next_at_ns,
            window_number,
            case
                when timing_source = 'gpu' and open_compute > 0 and open_communication > 0
                    then 'overlap'
                when timing_source = 'gpu' and open_compute > 0 then 'compute'
                when open_communication > 0 then 'communication'
                when open_optimizer > 0 then 'optimizer'
                when open_compute > 0 then 'compute'
                when open_memory > 0 then 'memory'
                else 'idle'
            end as part
        from (
            select
                {{ columns }}
                at_ns,
                next_at_ns,
                window_number,
                {% for lane in lanes -%}
                    {{ packed_count('open_lanes', lanes, lane) }} as open_{{ lane }}
                    {{- ',' if not loop.last }}
                {% endfor -%}
            from (
                select
                    {{ columns }}
                    at_ns,
                    lead(at_ns) over (partition by {{ partition }} order by at_ns) as next_at_ns,
                    sum(lane_delta) over (
                        partition by {{ partition }}
                        order by at_ns
                        rows between unbounded preceding and current row
                    ) as open_lanes,
                    max(window_number) over (
                        partition by {{ partition }}
                        order by at_ns
                        rows between unbounded preceding and current row
                    ) as window_number
                from (
                    select
                        {{ columns }}
                        at_ns,
                        sum(lane_delta) as lane_delta,
                        max(window_number) as window_number
                    from (
                        {% for edge, sign in [('start_ns', 1), ('end_ns', -1)] -%}
                            select
                                {{ columns }}
                                {{ edge }} as at_ns,
                                {{ packed_count_delta('kind', lanes, sign) }} as lane_delta,
                                cast(null as bigint) as window_number
                            from {{ intervals }}
                            where end_ns > start_ns
                            union all
                            select
                                {{ columns }}
                                {{ edge }} as at_ns,
                                {{ packed_count_delta("'window'", lanes, sign) }} as lane_delta,
                                {{ 'window_number' if sign == 1 else 'cast(null as bigint)' }}
                                    as window_number
                            from {{ windows }}
                            {{ 'union all' if not loop.last }}
                        {% endfor %}
                    ) as boundaries
                    group by {{ range(1, partition_by | length + 3) | join(', ') }}
                ) as instants
            ) as swept
        ) as decoded
        where open_window > 0
    ) as segments
    group by {{ range(1, partition_by | length + 3) | join(', ') }}
{%- endmacro %}
