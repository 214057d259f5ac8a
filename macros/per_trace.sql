{#
    Incremental builds by trace, with dbt's `delete+insert` strategy, whose
    incremental run on DuckDB inserts the new traces' rows directly
    (macros/materializations/duckdb_incremental.sql says why).

    The unit of change is the trace: ingest gives every loaded file a
    trace_id derived from its content, so a changed file is a new trace_id
    plus an unloaded old one. A per-trace model (a model whose every row
    depends on one trace only) is configured as

        materialized='incremental', incremental_strategy='delete+insert',
        unique_key='trace_id', post_hook="{{ delete_unloaded_traces() }}"

    and filters its input with `traces_to_build()` (or `traces_pending()`
    and `trace_filter()`): on an incremental run the traces it has no rows
    for yet, else all. Every row must come from such a filtered input: the
    incremental run then inserts the rows directly
    (macros/materializations/duckdb_incremental.sql). Per-run lookups (process
    groups, vpp chunks) and aggregates are plain tables rebuilt each time,
    so nothing here tracks context. A change of model code, seeds or vars
    needs `--full-refresh` (`tracehouse build` detects it and adds it).

    Which traces are loaded is read from the names of the lake's `traces`
    files (lake_trace_listing: `traces/run=<run_id>/<trace_id>.parquet`, a
    trace's commit marker), a directory listing that opens no file: through
    stg_lake__traces, every model's question and post-hook opened every
    `traces` file (0.14 s each at 768 files, ~27 times per build, growing
    with the lake).

    On Spark (target `spark`) dbt-spark offers no delete+insert for Parquet
    tables, so macros/materializations/spark_incremental.sql builds a `delete+insert` model as
    a plain table (every trace, every build): `traces_to_build()` is then
    `true` and `delete_unloaded_traces()` a no-op. Spark's strength is the
    full rebuild spread over a cluster; per-trace increments pay off on one
    machine, where DuckDB runs.
#}

{#- Whether this model computes only the traces it lacks (DuckDB's
    delete+insert), not every trace (a full rebuild, Spark). -#}
{% macro builds_per_trace() -%}
    {{ return(adapter.dispatch('builds_per_trace', 'tracehouse')()) }}
{%- endmacro %}

{% macro default__builds_per_trace() -%}
    {{ return(model.resource_type != 'unit_test' and is_incremental()) }}
{%- endmacro %}

{% macro spark__builds_per_trace() -%}
    {{ return(false) }}
{%- endmacro %}

{#- A predicate on `trace_id` selecting the traces this model must compute:
    on an incremental run the committed traces it has no rows for yet, read
    at run time and written into the SQL as literals, so that DuckDB skips
    the Parquet files and row groups of every other trace (a
    `not in (select ...)` subquery cannot be pushed into a scan, and made
    every incremental model read the whole lake). A trace whose rows come
    out empty (e.g. a CPU-only trace in a kernel model) is computed again by
    the next build: cheap, since it has none of the rows the model looks for.
    A model filtering several scans, each on its own qualified column, reads
    the list once: `{% set pending = traces_pending() %}` then
    `{{ trace_filter(pending, 'slices.trace_id') }}`. -#}
{% macro traces_to_build(column='trace_id') -%}
    {{ trace_filter(traces_pending(), column) }}
{%- endmacro %}

{#- The traces this model must compute: none for all of them (a full build,
    a unit test, Spark), else {'ids': [...], 'runs': {...}} or, above
    var('max_literal_traces'), {'query': the subquery listing them}. -#}
{% macro traces_pending() -%}
    {#- dbt unit tests render the model as the unit test: they see the full
        query and need no inputs beyond their own. Elsewhere ref() stays
        outside the condition, so dbt sees the dependency at parse time. -#}
    {%- if model.resource_type == 'unit_test' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set loaded_traces = ref('stg_lake__traces') -%}
    {%- if not builds_per_trace() -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return(loaded_trace_ids('(' ~ lake_trace_listing() ~ ')', 'true', this)) }}
{%- endmacro %}

{#- `column` restricted to `pending` (see traces_pending): `true` for all,
    `false` for no trace, else the ids as literals: an IN list up to
    var('max_in_list_traces') of them, a semi join on a VALUES list above.
    Why two forms (DuckDB 2.0, a ProfilerStep scan of a 768-trace lake,
    benchmarks/README.md): an IN list's cost grows with its length (16 ids
    0.27 s, 768: 0.63 s, 4,096: 1.02 s, more than reading every trace
    unfiltered, 0.51 s), a VALUES list's, joined by hash, stays flat
    (0.35 s, 0.57 s, 0.59 s) but loses to the IN list below ~500 ids. -#}
{% macro trace_filter(pending, column='trace_id') -%}
    {%- if pending is none -%}
        true
    {%- elif 'query' in pending -%}
        {{ column }} in ({{ pending['query'] }})
    {%- elif pending['ids'] | length == 0 -%}
        false
    {%- elif pending['ids'] | length > var('max_in_list_traces') -%}
        {{ column }} in (
            select pending_traces.trace_id from (values
            {%- for id in pending['ids'] %}
                ('{{ id | replace("'", "''") }}'){{ "," if not loop.last }}
            {%- endfor %}
            ) as pending_traces (trace_id)
        )
    {%- else -%}
        {{ column }} in (
            {%- for id in pending['ids'] -%}
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

{#- The traces of traces_pending() that also satisfy `condition` (SQL on
    int_traces_loaded's columns, alias `loaded`, as for loaded_traces()), in the
    same forms: a model that needs some traces' extra inputs (the FLOP
    model: the CPU ops' args of the traces recorded with shapes) reads them
    for those traces only, and for none when there are none. On a full
    build (and in a unit test, on Spark) every loaded trace satisfying the
    condition: loaded_traces(condition). -#}
{% macro traces_pending_where(condition) -%}
    {%- set loaded_traces_table = ref('int_traces_loaded') -%}
    {%- if builds_per_trace() -%}
        {{ return(loaded_trace_ids(loaded_traces_table, condition, this)) }}
    {%- endif -%}
    {{ return(loaded_traces(condition)) }}
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

{#- Post-hook: drop the rows of traces no longer in the lake (unloaded, or
    the old version of a changed file), by the lake's listing. -#}
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
