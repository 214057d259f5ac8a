{#
    Interval algebra shared by the interval models (one definition each).

    merge_intervals(relation, partition_by, start_column, end_column):
    gaps and islands. Sorted by start within each partition, an interval
    opens a new island when it starts strictly after the largest end before
    it, so touching intervals merge and nested ones vanish. Returns one row
    per island: partition columns, island_number, start_ns, end_ns, busy_ns,
    interval_count. One sorted pass over all intervals keeps only island
    starts and each partition's last row; the island ends and counts come
    from a second window over those few rows. No pairwise join.
    `carry`: columns that one value of the partition determines (run_id
    and rank, given trace_id), carried along but left out of the sort keys:
    fewer keys make the sort cheaper (0.94 s against 1.19 s for two million
    kernels). `count_column`: when the rows are islands already (merging
    the islands of every kind into those of all kernels, which sorts a
    fraction of the rows), how many intervals each row stands for; the
    island's interval_count is their sum. The largest end before a row is
    the one framed window; the largest end up to it is derived from it.

    sweep_overlap(relation, partition_by): given disjoint islands
    (partition columns, kind, start_ns, end_ns) of kinds `compute` and
    `communication`, returns partition columns and overlap_ns, the length
    of (union of compute) intersected with (union of communication). Each
    start adds 1 and each end subtracts 1 from its kind's open count; the
    time to the next boundary is overlap when both are open. Ties at one
    instant make zero-length segments, so their order does not matter. The
    two counts ride in one running sum (one windowed sum, not two).
#}
{% macro merge_intervals(
    relation, partition_by, start_column, end_column, carry=[], count_column=none
) -%}
    {%- set partition = partition_by | join(', ') -%}
    {%- set interval_order -%}
        partition by {{ partition }} order by {{ start_column }}, {{ end_column }}
    {%- endset -%}
    {%- set island_bounds -%}
        (partition by {{ partition }} order by interval_position)
    {%- endset -%}
    {%- set columns -%}
        {% for column in carry + partition_by -%}
            {{ column }},
        {% endfor -%}
    {%- endset -%}
    select
        {{ columns }}
        island_number,
        start_ns,
        end_ns,
        end_ns - start_ns as busy_ns,
        interval_count
    from (
        select
            {{ columns }}
            ts_ns as start_ns,
            is_island_start,
            sum(is_island_start) over (
                partition by {{ partition }}
                order by interval_position
                rows between unbounded preceding and current row
            ) as island_number,
            {# The island ends where the next island starts (that start's
               previous_end_ns), else at the partition's last row. #}
            case
                when lead(interval_position) over {{ island_bounds }} is null then running_end_ns
                when lead(is_island_start) over {{ island_bounds }} = 1
                    then lead(previous_end_ns) over {{ island_bounds }}
                else lead(running_end_ns) over {{ island_bounds }}
            end as end_ns,
            {# Intervals from this start up to the next island's start
               (exclusive), else up to the partition's last row (inclusive). #}
            case
                when lead(interval_position) over {{ island_bounds }} is null
                    then interval_position - intervals_before
                when lead(is_island_start) over {{ island_bounds }} = 1
                    then lead(intervals_before) over {{ island_bounds }} - intervals_before
                else lead(interval_position) over {{ island_bounds }} - intervals_before
            end as interval_count
        from (
            select
                {{ columns }}
                ts_ns,
                interval_position,
                interval_position - {{ count_column or 1 }} as intervals_before,
                previous_end_ns,
                {# The largest end up to this row: greatest skips a NULL. #}
                greatest(previous_end_ns, interval_end_ns) as running_end_ns,
                case
                    when previous_end_ns is null or ts_ns > previous_end_ns then 1 else 0
                end as is_island_start
            from (
                {# The one pass over every interval: one sort, three windows. #}
                select
                    {{ columns }}
                    {%- if count_column %}
                    {{ count_column }},
                    {%- endif %}
                    {{ start_column }} as ts_ns,
                    {{ end_column }} as interval_end_ns,
                    max({{ end_column }}) over (
                        {{ interval_order }} rows between unbounded preceding and 1 preceding
                    ) as previous_end_ns,
                    {% if count_column -%}
                    cast(sum({{ count_column }}) over (
                        {{ interval_order }} rows between unbounded preceding and current row
                    ) as bigint)
                    {%- else -%}
                    row_number() over ({{ interval_order }})
                    {%- endif %} as interval_position,
                    lead({{ start_column }}) over ({{ interval_order }}) as next_ts_ns
                from {{ relation }}
            ) as ordered
            {# Keep island starts and each partition's last row (a few rows per island). #}
            where previous_end_ns is null or ts_ns > previous_end_ns or next_ts_ns is null
        ) as bounds
    ) as islands
    where is_island_start = 1
{%- endmacro %}

{#- Islands of each kind (column `kind`) and of all intervals (kind `all`),
    over the same partition: merge_intervals per kind, then the `all`
    islands from those islands (their union is the union of every interval,
    and merging a few islands per kind sorts far fewer rows than every
    interval again). Returns merge_intervals' columns with `kind` after the
    partition columns. -#}
{% macro merge_intervals_by_kind(relation, partition_by, start_column, end_column, carry=[]) -%}
    {%- set columns -%}
        {% for column in carry + partition_by -%}
            {{ column }},
        {% endfor -%}
    {%- endset -%}
    with kind_islands as (
        {{ merge_intervals(relation, partition_by + ['kind'], start_column, end_column, carry) }}
    )
    select
        {{ columns }}
        kind,
        island_number,
        start_ns,
        end_ns,
        busy_ns,
        interval_count
    from kind_islands
    union all
    select
        {{ columns }}
        'all' as kind,
        island_number,
        start_ns,
        end_ns,
        busy_ns,
        interval_count
    from (
        {{ merge_intervals(
            'kind_islands', partition_by, 'start_ns', 'end_ns', carry, 'interval_count'
        ) }}
    ) as all_islands
{%- endmacro %}

{% macro sweep_overlap(relation, partition_by) -%}
    {%- set partition = partition_by | join(', ') -%}
    {#- Both open counts ride in one running sum: compute in the 4096s,
        communication in the units, each biased by 2048 when decoded, so a
        count may dip below zero (an island that kernel_time_unit_ns
        rounding left with end < start) and still decode exactly. -#}
    {%- set bias = 2048 * 4096 + 2048 -%}
    select
        {% for column in partition_by -%}
            {{ column }},
        {% endfor -%}
        cast(sum(
            case
                when
                    {{ integer_divide('open_lanes + ' ~ bias, 4096) }} % 4096 > 2048
                    and (open_lanes + {{ bias }}) % 4096 > 2048
                    then next_at_ns - at_ns
                else 0
            end
        ) as bigint) as overlap_ns
    from (
        select
            {% for column in partition_by -%}
                {{ column }},
            {% endfor -%}
            at_ns,
            sum(lane_delta) over (
                partition by {{ partition }}
                order by at_ns, lane_delta
                rows between unbounded preceding and current row
            ) as open_lanes,
            lead(at_ns) over (
                partition by {{ partition }}
                order by at_ns, lane_delta
            ) as next_at_ns
        from (
            select
                {% for column in partition_by -%}
                    {{ column }},
                {% endfor -%}
                start_ns as at_ns,
                case when kind = 'compute' then 4096 else 1 end as lane_delta
            from {{ relation }}
            where kind in ('compute', 'communication')
            union all
            select
                {% for column in partition_by -%}
                    {{ column }},
                {% endfor -%}
                end_ns as at_ns,
                case when kind = 'compute' then -4096 else -1 end as lane_delta
            from {{ relation }}
            where kind in ('compute', 'communication')
        ) as boundaries
    ) as swept
    group by {{ range(1, partition_by | length + 1) | join(', ') }}
{%- endmacro %}
