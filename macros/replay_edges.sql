{#
    replay_edges(edge_type, relation, src_node_id, dst_node_id, src_point,
    dst_point, where): the rows of one kind of dependency edge of the
    what-if replay graph (int_replay_edges_typed), in the one shape every
    kind shares: edge_type, src_node_id, src_point, dst_node_id, dst_point,
    then the run, iteration, rank and trace the edge counts on (its
    target's; a collective instance's, its member's), read unqualified from
    `relation`, which must carry them.

    One definition of the edge row, so each kind states only what differs:
    where its source and target come from and which of their points it
    ties (`start` or `end`; any other value is a SQL expression of
    `relation`'s columns that gives one, e.g. cpu_order's end -> start or
    start -> start). `where` filters `relation` (SQL, default none).
#}
{% macro replay_edges(edge_type, relation, src_node_id, dst_node_id,
                      src_point='end', dst_point='start', where=none) -%}
    select
        '{{ edge_type }}' as edge_type,
        {{ src_node_id }} as src_node_id,
        {{ replay_edge_point(src_point) }} as src_point,
        {{ dst_node_id }} as dst_node_id,
        {{ replay_edge_point(dst_point) }} as dst_point,
        run_id,
        iteration,
        rank,
        trace_id
    from {{ relation }}
    {%- if where is not none %}
    where {{ where }}
    {%- endif %}
{%- endmacro %}

{#
    replay_latest_sources(candidates, recorded_waits, recorded_where): one
    row per waiting node (dst_node_id) of `candidates`, with the source
    that binds it: the latest-ending of its candidate sources
    (arg_max(src_node_id, src_end_ns)), and the run, iteration, rank and
    trace the edge counts on. A node whose wait the profiler recorded
    (a dst_node_id of `recorded_waits` where `recorded_where` holds) needs
    no inferred edge and is left out. The source step shared by the
    inferred waits (gpu_wait, host_sync) of int_replay_trace_edges_typed,
    before replay_edges() types them; `candidates` must carry
    dst_node_id, src_node_id, src_end_ns, run_id, iteration, rank and
    trace_id.
#}
{% macro replay_latest_sources(candidates, recorded_waits, recorded_where) -%}
    select
        dst_node_id,
        arg_max(src_node_id, src_end_ns) as src_node_id,
        run_id,
        iteration,
        rank,
        trace_id
    from {{ candidates }}
    where
        dst_node_id not in (
            select {{ recorded_waits }}.dst_node_id from {{ recorded_waits }}
            where {{ recorded_where }}
        )
    group by 1, 3, 4, 5, 6
{%- endmacro %}

{#- A point of an edge: the literal `start` or `end`, else the SQL expression given. -#}
{% macro replay_edge_point(point) -%}
    {{ "'" ~ point ~ "'" if point in ('start', 'end') else point }}
{%- endmacro %}

{#- replay_node_id(parts...): a replay node's id, a 63-bit hash of the SQL
    expressions given (a trace's node: trace, kind, slice, iteration; a
    collective instance: run, kind, collective id). Not a row number over
    every run, so a trace's nodes keep their ids when other traces come and
    go and the per-trace models build incrementally; a collision (about 1
    in 200,000 at 10 M nodes) is refused by the data test on
    int_replay_nodes_listed and by the replay's loader, never merged. -#}
{% macro replay_node_id() -%}
    cast(hash({{ varargs | join(', ') }}) >> 1 as bigint)
{%- endmacro %}
