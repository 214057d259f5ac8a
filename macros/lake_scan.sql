{#
    Reading the lake's per-trace tables: the columns their staging views
    expose (one list per table, shared by the view and by lake_scan), and a
    scan that reads only the files of the traces a model needs.

    Why not always the staging view: the view reads its table through a glob
    over every file of the lake, and DuckDB binds every file the glob
    matches before a trace_id filter can prune any. On a 768-file lake, 256
    new traces' slices took 0.20 s through the glob with the filter, 0.25 s
    for every file, 0.079 s named file by file; at 1,024 ranks x 4
    iterations an incremental `int_step_windows_resolved` cost as much for the
    1,024 new traces as a full build for all 5,120 (benchmarks/README.md).
    Every loaded trace has one file per table at
    `<lake_root>/<table>/run=<run_id>/<trace_id>.parquet` (ingest/lake.py),
    so the pending traces' files can be named.
    Measured again for issue 30 (DuckDB 2.0.1, 256 x 2 lake, iteration 2's
    256 traces' kernels of 512 traces' slices, 3 runs, CPU s): named files
    0.20-0.24 (257 files read); the staging view (glob, commit filter)
    0.46-0.55 (513); the glob with hive_partitioning and run_id + trace_id
    filters 0.37-0.47 (512: trace_id is no partition key, and run_id prunes
    nothing within a run); the glob with a `filename IN (...)` filter
    0.32-0.34 (256 of 512 scanned, but every file listed). So staging is not
    the one lake reader: the per-trace models read through lake_scan.
#}

{#- The lake folder: var('lake_root'), else $TRACEHOUSE_WAREHOUSE/lake, else
    warehouse/lake. Read only when a model runs (never while dbt parses):
    see lake_source. -#}
{% macro lake_root() -%}
    {{ return(var('lake_root', '') or (env_var('TRACEHOUSE_WAREHOUSE', 'warehouse') ~ '/lake')) }}
{%- endmacro %}

{#- The folder of lake table `table`, escaped for a SQL string literal
    (quotes doubled): what every read of the lake's files builds on. -#}
{% macro lake_folder(table) -%}
    {{ return((lake_root() ~ '/' ~ table) | replace("'", "''")) }}
{%- endmacro %}

{#- Lake table `table` as the staging views read it: on DuckDB, every
    Parquet file of the table under lake_root(), by column name
    (union_by_name; run_id is a real column, so no hive partitioning);
    elsewhere, and in unit tests (which stand fixtures in for sources), the
    `lake` source itself (Spark registers the lake as external tables:
    macros/spark_lake.sql). The source is named either way, so lineage and
    `source:lake.<table>+` selections stay dbt's.
    Why not the source's external_location: YAML is rendered while dbt
    parses, so an env_var there made the sources file differ for every
    warehouse path, and dbt's partial parse re-parsed it on the first build
    of each new warehouse (measured: 5.8 s against 3.7 s for a one-view
    build, 2-3 s of a full build's start). Here the path is rendered only
    when the model runs. -#}
{% macro lake_source(table) -%}
    {%- set relation = source('lake', table) -%}
    {%- if execute and target.type == 'duckdb' and model.resource_type != 'unit_test' -%}
        read_parquet('{{ lake_folder(table) }}/**/*.parquet', union_by_name = true,
                     hive_partitioning = false)
    {%- else -%}
        {{ relation }}
    {%- endif -%}
{%- endmacro %}

{#- The rows of per-trace lake table `table` whose trace is committed: its
    `traces` file is in the lake. Ingest writes a trace's other tables
    first and its `traces` row last, so a load interrupted mid-commit
    leaves rows that no trace owns; every per-trace staging view reads its
    table through this filter (one definition of "committed", rule 7 of
    STYLE.md), and lake_scan reads the traces it is given, which are
    committed by construction. -#}
{% macro committed_lake_rows(table) -%}
    select *
    from {{ lake_source(table) }}
    where trace_id in (
        select committed_traces.trace_id
        from {{ lake_source('traces') }} as committed_traces
    )
{%- endmacro %}

{#- The select list of lake table `table` as its staging view exposes it
    (models/staging/lake/stg_lake__<table>.sql): raw columns by name, times
    renamed to `_ns` and `end_ns` derived. The one place these renames live. -#}
{% macro lake_columns(table) -%}
    {%- if table == 'slices' -%}
        ---------- ids
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        parent_id,
        correlation,
        external_id,
        device,
        stream,
        launch_slice_id,
        launch_track_id,
        annotation_slice_id,

        ---------- strings
        phase,
        category,
        name,
        collective_name,
        process_group_name,
        process_group_desc,
        dtype,
        args,
        frame_kind,
        frame_file,
        frame_function,
        launch_source,
        launch_name,
        annotation_kind,

        ---------- numerics
        depth,
        group_size,
        in_msg_nelems,
        out_msg_nelems,
        process_group_ranks,

        ---------- booleans
        is_partial_overlap,
        is_gpu,
        has_role,

        ---------- times (ns, absolute clock)
        ts as ts_ns,
        dur as dur_ns,
        ts + dur as end_ns,
        launch_ts as launch_ts_ns,
        launch_ts + launch_dur as launch_end_ns
    {%- elif table == 'threads' -%}
        ---------- ids
        run_id,
        rank,
        trace_id,
        track_id,
        pid,
        tid,

        ---------- strings
        thread_name,

        ---------- numerics
        thread_sort_index,
        slice_count,

        ---------- booleans
        is_gpu
    {%- elif table == 'traces' -%}
        ---------- ids
        run_id,
        trace_id,
        rank,
        content_hash,
        kineto_trace_id,

        ---------- strings
        path,
        file_format,
        layout,
        engine,
        backend,
        host_name,
        distributed_info,
        device_properties,

        ---------- numerics
        world_size,
        iteration,
        min_profiler_step,
        max_profiler_step,
        schema_version,
        size_bytes,
        uncompressed_bytes,
        event_count,
        slice_count,
        flow_count,
        unpaired_flow_events,
        partial_overlap_count,
        lake_format,

        ---------- booleans
        has_op_shapes,

        ---------- times (ns)
        mtime_ns,
        base_time_ns,
        trace_start_ns,
        trace_end_ns,

        ---------- timestamps
        ingested_at
    {%- elif table == 'annotation_ranges' -%}
        ---------- ids
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        annotation_slice_id,

        ---------- strings
        annotation_kind,
        name,
        annotation_path,

        ---------- numerics
        annotation_lineage,

        ---------- times (ns, absolute clock)
        ts as ts_ns,
        dur as dur_ns,
        ts + dur as end_ns
    {%- elif table == 'process_groups' -%}
        ---------- ids
        run_id,
        rank,
        trace_id,
        pg_name,

        ---------- strings
        source,
        pg_desc,
        backend_config,

        ---------- numerics
        pg_size,
        ranks
    {%- elif table == 'flows' -%}
        ---------- ids
        run_id,
        rank,
        trace_id,
        flow_id,
        slice_out,
        slice_in,

        ---------- strings
        category,

        ---------- times (ns, absolute clock)
        ts_out as ts_out_ns,
        ts_in as ts_in_ns
    {%- else -%}
        {{ exceptions.raise_compiler_error(
            "lake_columns: no column list for lake table '" ~ table
            ~ "' (known: slices, threads, flows, traces, process_groups)") }}
    {%- endif -%}
{%- endmacro %}

{#- A relation with the rows of staging view `stg_lake__<table>` for
    `traces` (traces_pending() or loaded_traces()), reading only their
    files when they are named: a subquery over the list of files (plus the
    table's zero-row `_empty.parquet`, so that the columns and types are the
    lake's even when no trace is pending, and an empty list reads no data).
    Otherwise (`traces` none for every trace, or a 'query' above
    var('max_literal_traces')) the staging view itself; callers filter with
    trace_filter(traces) in both cases. -#}
{% macro lake_scan(table, traces) -%}
    {#- ref() first, outside any condition, so that dbt sees the dependency
        at parse time and unit tests can give the view's rows as input. -#}
    {%- set staging_view = ref('stg_lake__' ~ table) -%}
    {%- if traces is none or 'query' in traces or target.type != 'duckdb' -%}
        {{ staging_view }}
    {%- else -%}
        {%- set folder = lake_folder(table) -%}
        (
            select
                {{ lake_columns(table) | indent(8) }}
            from read_parquet(
                [
                    '{{ folder }}/_empty.parquet'
                    {%- for trace_id in traces['ids'] %},
                    '{{ folder }}/run={{ traces["runs"][trace_id] | replace("'", "''") }}/{{ trace_id | replace("'", "''") }}.parquet'
                    {%- endfor %}
                ],
                union_by_name = true,
                hive_partitioning = false
            )
        )
    {%- endif -%}
{%- endmacro %}
