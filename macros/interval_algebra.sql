{#
    Interval algebra shared by the interval models (one definition each).

    merge_intervals(relation, partition_by, start_column, end_column):
    gaps and islands. Sorted by start within each partition, an interval
    opens a new island when it starts strictly after the largest end before
    it, so touching intervals merge and nested ones vanish. Returns one row
    per island: partition columns, island_number, start_ns, end_ns, busy_ns,
    interval_count. One sort and two running windows; no pairwise join.

    sweep_overlap(relation, partition_by): given disjoint islands
    (partition columns, kind, start_ns, end_ns) of kinds `compute` and
    `communication`, returns partition columns and overlap_ns, the length
    of (union of compute) intersected with (union of communication). Each
    start adds 1 and each end subtracts 1 from its kind's open count; the
    time to the next boundary is overlap when both are open. Ties at one
    instant make zero-length segments, so their order does not matter.
#}
{% macro merge_intervals(relation, partition_by, start_column, end_column) -%}
    {%- set partition = partition_by | join(', ') -%}
    select
        {% for column in partition_by -%}
            {{ column }},
        {% endfor -%}
        island_number,
        min(ts_ns) as start_ns,
        max(end_ns) as end_ns,
        max(end_ns) - min(ts_ns) as busy_ns,
        count(*) as interval_count
    from (
        select
            {% for column in partition_by -%}
                {{ column }},
            {% endfor -%}
            ts_ns,
            end_ns,
            sum(is_island_start) over (
                partition by {{ partition }}
                order by ts_ns, end_ns
                rows between unbounded preceding and current row
            ) as island_number
        from (
            select
                {% for column in partition_by -%}
                    {{ column }},
                {% endfor -%}
                ts_ns,
                end_ns,
                case
                    when previous_end_ns is null or ts_ns > previous_end_ns then 1 else 0
                end as is_island_start
            from (
                select
                    {% for column in partition_by -%}
                        {{ column }},
                    {% endfor -%}
                    {{ start_column }} as ts_ns,
                    {{ end_column }} as end_ns,
                    max({{ end_column }}) over (
                        partition by {{ partition }}
                        order by {{ start_column }}, {{ end_column }}
                        rows between unbounded preceding and 1 preceding
                    ) as previous_end_ns
                from {{ relation }}
            ) as with_previous_end
        ) as island_starts
    ) as numbered
    group by
        {% for column in partition_by -%}
            {{ column }},
        {% endfor -%}
        island_number
{%- endmacro %}

{% macro sweep_overlap(relation, partition_by) -%}
    {%- set partition = partition_by | join(', ') -%}
    select
        {% for column in partition_by -%}
            {{ column }},
        {% endfor -%}
        sum(
            case
                when open_compute > 0 and open_communication > 0
                    then next_at_ns - at_ns
                else 0
            end
        ) as overlap_ns
    from (
        select
            {% for column in partition_by -%}
                {{ column }},
            {% endfor -%}
            at_ns,
            sum(compute_delta) over (
                partition by {{ partition }}
                order by at_ns, compute_delta, communication_delta
                rows between unbounded preceding and current row
            ) as open_compute,
            sum(communication_delta) over (
                partition by {{ partition }}
                order by at_ns, compute_delta, communication_delta
                rows between unbounded preceding and current row
            ) as open_communication,
            lead(at_ns) over (
                partition by {{ partition }}
                order by at_ns, compute_delta, communication_delta
            ) as next_at_ns
        from (
            select
                {% for column in partition_by -%}
                    {{ column }},
                {% endfor -%}
                start_ns as at_ns,
                case when kind = 'compute' then 1 else 0 end as compute_delta,
                case when kind = 'communication' then 1 else 0 end as communication_delta
            from {{ relation }}
            where kind in ('compute', 'communication')
            union all
            select
                {% for column in partition_by -%}
                    {{ column }},
                {% endfor -%}
                end_ns as at_ns,
                case when kind = 'compute' then -1 else 0 end as compute_delta,
                case when kind = 'communication' then -1 else 0 end as communication_delta
            from {{ relation }}
            where kind in ('compute', 'communication')
        ) as boundaries
    ) as swept
    group by
        {% for column in partition_by -%}
            {{ column }}{{ "," if not loop.last }}
        {% endfor %}
{%- endmacro %}
