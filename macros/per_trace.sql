{#
    Per-trace builds: the `per_trace` materialization
    (macros/materializations/per_trace.sql), declared per folder in
    dbt_project.yml, and the one trace filter its models read their inputs
    through.

    The unit of change is the trace: ingest gives every loaded file a
    trace_id derived from its content, so a changed file is a new trace_id
    plus an unloaded old one. A per-trace model (a model whose every row
    depends on one trace only) filters every input with

        {%- set pending = traces_pending() %}   (or traces_pending(where=...))
        ... where {{ trace_filter(pending, 'alias.trace_id') }}

    On a build of an existing table that is the loaded traces the table has
    no rows for yet, so the materialization inserts the query's rows and
    deletes the rows of unloaded traces; on a first build, a full refresh, a
    unit test or Spark it is every trace and the table is built whole.
    Per-run lookups (process groups, vpp chunks) and aggregates are plain
    tables rebuilt each time, so nothing here tracks context. Rows computed
    by other code are never mixed with new ones: `tracehouse build` drops
    the per-trace tables whose model changed since the last build, and their
    descendants, before dbt runs (tracehouse/build/state.py).

    Which traces are loaded is read from the names of the lake's `traces`
    files (lake_trace_listing: `traces/run=<run_id>/<trace_id>.parquet`, a
    trace's commit marker), a directory listing that opens no file: through
    stg_lake__traces, every model's question and post-hook opened every
    `traces` file (0.14 s each at 768 files, ~27 times per build, growing
    with the lake).

    On Spark (target `spark`) dbt-spark offers no row-level delete for
    Parquet tables, so the materialization builds a plain table (every
    trace, every build): builds_per_trace() is false there. Spark's strength
    is the full rebuild spread over a cluster; per-trace increments pay off
    on one machine, where DuckDB runs.
#}

{#- Whether this model computes only the traces it lacks (a per_trace model
    whose table exists, not fully refreshed, on DuckDB), not every trace. -#}
{% macro builds_per_trace() -%}
    {{ return(adapter.dispatch('builds_per_trace', 'tracehouse')()) }}
{%- endmacro %}

{% macro default__builds_per_trace() -%}
    {%- if not execute or model.resource_type == 'unit_test'
        or model.config.materialized != 'per_trace' -%}
        {{ return(false) }}
    {%- endif -%}
    {%- set relation = adapter.get_relation(this.database, this.schema, this.identifier) -%}
    {{ return(relation is not none and relation.type == 'table' and not should_full_refresh()) }}
{%- endmacro %}

{% macro spark__builds_per_trace() -%}
    {{ return(false) }}
{%- endmacro %}

{#- The traces this model must compute: none for all of them (a full build,
    a unit test, Spark), else the loaded traces it has no rows for, read at
    run time and written into the SQL as literals, so that DuckDB skips the
    Parquet files and row groups of every other trace (a
    `not in (select ...)` subquery cannot be pushed into a scan, and made
    every per-trace model read the whole lake): {'ids': [...], 'runs':
    {...}}, or {'query': the subquery listing them} above
    var('max_literal_traces'). With `where` (SQL on int_traces_loaded's
    columns, alias `loaded`, e.g. 'loaded.has_op_shapes'), only those that
    satisfy it, and on a full build every loaded trace that does
    (loaded_traces): a model that needs some traces' extra inputs (the FLOP
    model: the CPU ops' args of the traces recorded with shapes) reads them
    for those traces only. A trace whose rows come out empty (a CPU-only
    trace in a kernel model) is computed again by the next build: cheap,
    since it has none of the rows the model looks for. -#}
{% macro traces_pending(where=none) -%}
    {#- dbt unit tests render the model as the unit test: they see the
        full query and need no inputs beyond their own (with `where`, the
        int_traces_loaded they give). Elsewhere ref() stays outside any
        run-time condition, so dbt sees the dependency at parse time. -#}
    {%- if where is none and model.resource_type == 'unit_test' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set loaded_table = ref('stg_lake__traces') if where is none
                           else ref('int_traces_loaded') -%}
    {%- if not builds_per_trace() -%}
        {{ return(none if where is none else loaded_traces(where)) }}
    {%- endif -%}
    {%- if where is none -%}
        {{ return(loaded_trace_ids('(' ~ lake_trace_listing() ~ ')', 'true', this)) }}
    {%- endif -%}
    {{ return(loaded_trace_ids(loaded_table, where, this)) }}
{%- endmacro %}

{#- The one trace filter: `column` restricted to `traces` (traces_pending(),
    loaded_traces() or traces_with_rows()): `true` for all, `false` for no
    trace, else the ids as literals: an IN list up to
    var('max_in_list_traces') of them, a semi join on a VALUES list above.
    Why two forms (DuckDB 2.0, a ProfilerStep scan of a 768-trace lake,
    benchmarks/README.md): an IN list's cost grows with its length (16 ids
    0.27 s, 768: 0.63 s, 4,096: 1.02 s, more than reading every trace
    unfiltered, 0.51 s), a VALUES list's, joined by hash, stays flat
    (0.35 s, 0.57 s, 0.59 s) but loses to the IN list below ~500 ids. A
    model filtering several scans reads the list once
    (`{% set pending = traces_pending() %}`) and filters each. -#}
{% macro trace_filter(traces, column='trace_id') -%}
    {%- if traces is none -%}
        true
    {%- elif 'query' in traces -%}
        {{ column }} in ({{ traces['query'] }})
    {%- elif traces['ids'] | length == 0 -%}
        false
    {%- elif traces['ids'] | length > var('max_in_list_traces') -%}
        {{ column }} in (
            select pending_traces.trace_id from (values
            {%- for id in traces['ids'] %}
                ('{{ id | replace("'", "''") }}'){{ "," if not loop.last }}
            {%- endfor %}
            ) as pending_traces (trace_id)
        )
    {%- else -%}
        {{ column }} in (
            {%- for id in traces['ids'] -%}
                '{{ id | replace("'", "''") }}'{{ ", " if not loop.last }}
            {%- endfor -%}
        )
    {%- endif -%}
{%- endmacro %}

{#- The loaded traces that satisfy `condition` (SQL on int_traces_loaded's columns,
    those of stg_lake__traces, qualified by its alias `loaded`, e.g.
    "loaded.file_format = 'nsys'": an unqualified name that the table lacked
    would bind to the calling query), read at run time as for
    traces_pending(): a model that needs a few traces of the lake (the
    Nsight marts on a warehouse of Kineto traces) then reads none of the
    others' files (lake_scan, trace_filter), and nothing at all when there
    are none. Outside a run (parse, a unit test, a warehouse where
    int_traces_loaded does not exist yet, Spark) {'query': the equivalent subquery}. -#}
{% macro loaded_traces(condition) -%}
    {%- set loaded_traces = ref('int_traces_loaded') -%}
    {%- if execute and model.resource_type != 'unit_test' and target.type == 'duckdb'
        and adapter.get_relation(loaded_traces.database, loaded_traces.schema,
                                 loaded_traces.identifier) is not none -%}
        {{ return(loaded_trace_ids(loaded_traces, condition)) }}
    {%- endif -%}
    {{ return({'query': 'select loaded.trace_id from ' ~ loaded_traces
                        ~ ' as loaded where ' ~ condition}) }}
{%- endmacro %}

{#- The loaded traces as a query of (run_id, trace_id), from the names of
    the lake's `traces` files (`<lake_root>/traces/run=<run_id>/<trace_id>.parquet`;
    ingest renames a trace's `traces` file into place after every other
    table's, and writes temporaries as hidden `.tmp` files): a directory
    listing, no file opened. DuckDB only (glob), like the per-trace
    increments that use it. -#}
{% macro lake_trace_listing() -%}
    select
        regexp_extract(listed.file, '/run=([^/]+)/[^/]+[.]parquet$', 1) as run_id,
        regexp_extract(listed.file, '/([^/]+)[.]parquet$', 1) as trace_id
    from glob('{{ lake_folder('traces') }}/run=*/*.parquet') as listed
{%- endmacro %}

{#- The traces of `loaded_traces` satisfying `condition` and, when `built`
    is given, having no row in it, read now: {'ids': sorted list, 'runs':
    {trace_id: run_id}} (the run names a trace's lake files: lake_scan), or
    {'query': the subquery} above var('max_literal_traces') ids, where a huge
    IN list costs more to plan than the pruning saves. -#}
{% macro loaded_trace_ids(loaded_traces, condition, built=none) -%}
    {%- set pending -%}
        select
            loaded.trace_id,
            loaded.run_id
        from {{ loaded_traces }} as loaded
        where {{ condition }}
        {%- if built is not none %}
            and loaded.trace_id not in (select distinct done.trace_id from {{ built }} as done)
        {%- endif %}
    {%- endset -%}
    {%- set rows = run_query(pending).rows -%}
    {%- if rows | length > var('max_literal_traces') -%}
        {{ return({'query': 'select pending.trace_id from (' ~ pending ~ ') as pending'}) }}
    {%- endif -%}
    {%- set runs = {} -%}
    {%- for row in rows -%}
        {%- do runs.update({row[0]: row[1]}) -%}
    {%- endfor -%}
    {{ return({'ids': runs.keys() | sort, 'runs': runs}) }}
{%- endmacro %}

{#- The statement that drops the rows of traces no longer in the lake
    (unloaded, or the old version of a changed file), by the lake's
    listing: run by the per_trace materialization after its insert, in the
    same transaction. -#}
{% macro delete_unloaded_traces() -%}
    {#- An empty listing deletes nothing: glob() finds no file in a folder
        that does not exist (a mistyped lake_root), and a lake with no trace
        at all is refused by `tracehouse build` before dbt starts. -#}
    {%- if builds_per_trace() -%}
    delete from {{ this }}
    where
        trace_id not in (
            select loaded.trace_id from ({{ lake_trace_listing() }}) as loaded
        )
        and exists (select 1 from ({{ lake_trace_listing() }}) as any_loaded)
    {%- endif -%}
{%- endmacro %}
