{#
    Incremental builds by trace: the one place that decides which traces a
    build must (re)compute, shared by the incremental kernel models.

    The unit of change is the trace: (trace_id, content_hash) of
    stg_lake__traces. Each incremental model keeps a ledger table beside
    itself, `<model>__traces`, holding the traces it was last built from
    (written by the post-hook `incremental_traces_record`). A build compares
    the lake with that ledger:

    * new: in the lake, not in the ledger (a new file, or a changed file,
      whose content hash and hence trace_id are new);
    * gone: in the ledger, not in the lake (an unloaded trace, or the old
      version of a changed file).

    A model writes that diff once to `<model>__changes` (pre-hook
    `incremental_traces_prepare`), deletes the rows that new or gone traces
    touch (pre-hook `incremental_traces_delete`) and inserts what it
    recomputes from the new traces (filter `incremental_traces_where` in the model body), with
    incremental_strategy 'append'. Three granularities (`grain`):

    * 'trace': rows carry trace_id (int_kernels_launched);
    * 'partition': rows are run x rank x iteration aggregates; a trace
      touches its run and rank, at the iterations it covers (its
      ProfilerStep range, else its folder iteration, else
      var('default_iteration')) and, when it has steps, the NULL iteration
      of kernels launched outside them (shared by the rank's traces, hence
      recomputed from all of them);
    * 'rank': rows are run x rank aggregates over all iterations
      (fct_kernel_summary).

    Modes, decided when the model is compiled (`incremental_traces_mode`):
    'full' (a new table, --full-refresh, or a dbt unit test: no filter, no
    delete), 'rebuild' (the table exists but its ledger does not, e.g. it
    was built before it became incremental: delete all, insert all) and
    'incremental'. A full build and an incremental one give the same rows
    (tests/test_incremental.py compares them table by table).

    The ledger also holds a fingerprint of the code the rows were computed
    with (`incremental_traces_fingerprint`: checksums of the model and every
    model and seed upstream of it, and var('incremental_rebuild_vars')); when
    it differs, the model is rebuilt (and says so in the build log). Edits to
    macros are not in dbt's graph: after changing a macro, build with
    `--full-refresh`. Since a change of the model's columns comes with a
    change of its code or of code upstream, hence with a rebuild that
    rewrites every row, the models use on_schema_change='sync_all_columns'.
#}

{% macro incremental_traces_ledger() -%}
    {{- return(api.Relation.create(
        database=this.database,
        schema=this.schema,
        identifier=this.identifier ~ '__traces',
        type='table',
    )) -}}
{%- endmacro %}

{% macro incremental_traces_mode() -%}
    {#- dbt unit tests render the model with the unit test as `model`; they
        always see the full query (their fixtures are not in the ledger). -#}
    {%- if model.resource_type == 'unit_test' or not is_incremental() -%}
        {{- return('full') -}}
    {%- endif -%}
    {%- set ledger = incremental_traces_ledger() -%}
    {%- set found = adapter.get_relation(ledger.database, ledger.schema, ledger.identifier) -%}
    {%- if found is none -%}
        {{- return('rebuild') -}}
    {%- endif -%}
    {%- set columns = adapter.get_columns_in_relation(found) | map(attribute='name') | list -%}
    {%- if 'code_fingerprint' not in columns -%}
        {{- return('rebuild') -}}
    {%- endif -%}
    {%- set stored = run_query(
        'select distinct code_fingerprint from ' ~ ledger
    ).columns[0].values() -%}
    {%- if stored | length != 1 or stored[0] != incremental_traces_fingerprint() -%}
        {{- return('rebuild') -}}
    {%- endif -%}
    {{- return('incremental') -}}
{%- endmacro %}

{#- What the model's rows were computed with: the checksums of the model's
    file and of every model and seed upstream of it (so an edited model or
    seed CSV rebuilds the tables that depend on it), and the vars the kernel
    chain reads. A ledger written under another fingerprint means 'rebuild'.
    Edits to macros are not seen (dbt's graph does not carry them): after
    editing one, build with --full-refresh. -#}
{% macro incremental_traces_fingerprint() -%}
    {%- if not execute -%}
        {{- return('') -}}
    {%- endif -%}
    {%- set checksums = {} -%}
    {%- do incremental_traces_collect(model.unique_id, checksums) -%}
    {%- set parts = [] -%}
    {%- for unique_id in checksums | sort -%}
        {%- do parts.append(unique_id ~ '=' ~ checksums[unique_id]) -%}
    {%- endfor -%}
    {%- for name in var('incremental_rebuild_vars') -%}
        {%- do parts.append(name ~ '=' ~ tojson(var(name))) -%}
    {%- endfor -%}
    {{- return(local_md5(parts | join(';'))) -}}
{%- endmacro %}

{% macro incremental_traces_collect(unique_id, checksums) -%}
    {%- set node = graph.nodes.get(unique_id) -%}
    {%- if node is not none and unique_id not in checksums -%}
        {%- do checksums.update({unique_id: node['checksum']['checksum']}) -%}
        {%- for parent in node['depends_on']['nodes'] -%}
            {%- do incremental_traces_collect(parent, checksums) -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro %}

{#- The traces to (re)compute, one row per trace and change ('new' or
    'gone'), with the iterations each covers: the lake's traces against the
    ledger in one full outer join (one scan of the traces manifest). -#}
{% macro incremental_traces_diff() -%}
    {%- set traces = ref('stg_lake__traces') -%}
    {%- set ledger = incremental_traces_ledger() -%}
    select
        coalesce(loaded.trace_id, built.trace_id) as trace_id,
        coalesce(loaded.run_id, built.run_id) as run_id,
        coalesce(loaded.rank, built.rank) as rank,
        case when built.trace_id is null then 'new' else 'gone' end as change,
        coalesce(loaded.min_profiler_step, built.min_profiler_step) is not null as has_steps,
        coalesce(
            loaded.min_profiler_step,
            built.min_profiler_step,
            loaded.iteration,
            built.iteration,
            {{ var('default_iteration') }}
        ) as first_iteration,
        coalesce(
            loaded.max_profiler_step,
            built.max_profiler_step,
            loaded.iteration,
            built.iteration,
            {{ var('default_iteration') }}
        ) as last_iteration
    from (
        select
            trace_id,
            content_hash,
            run_id,
            rank,
            iteration,
            min_profiler_step,
            max_profiler_step
        from {{ traces }}
    ) as loaded
    full outer join {{ ledger }} as built
        on
            loaded.trace_id = built.trace_id
            and loaded.content_hash = built.content_hash
    where loaded.trace_id is null or built.trace_id is null
{%- endmacro %}

{#- Where a build keeps its diff: `<model>__changes`, written by the first
    pre-hook (`incremental_traces_prepare`) and read by the delete hook and
    the model body, so the diff is computed once per model build. Kept after
    the build: it says what the last incremental build recomputed. -#}
{% macro incremental_traces_changed() -%}
    {{- return(api.Relation.create(
        database=this.database,
        schema=this.schema,
        identifier=this.identifier ~ '__changes',
        type='table',
    )) -}}
{%- endmacro %}

{#- First pre-hook of every incremental kernel model: write the diff (in
    incremental mode only; an empty hook is skipped by dbt). -#}
{% macro incremental_traces_prepare() -%}
    {%- if incremental_traces_mode() == 'incremental' -%}
        create or replace table {{ incremental_traces_changed() }} as
        {{ incremental_traces_diff() }}
    {%- endif -%}
{%- endmacro %}

{#- Predicate: the row (its columns named by the arguments) is touched by a
    changed trace of `changes` ('new', or 'any' for new and gone). -#}
{% macro incremental_traces_touch(grain, changes, trace_id='trace_id', run_id='run_id', rank='rank', iteration='iteration') -%}
    {%- if grain == 'trace' -%}
        {{ trace_id }} in (
            select changed_traces.trace_id
            from {{ incremental_traces_changed() }} as changed_traces
            {%- if changes == 'new' %}
            where changed_traces.change = 'new'
            {%- endif %}
        )
    {%- elif grain in ('partition', 'rank') -%}
        exists (
            select 1
            from {{ incremental_traces_changed() }} as changed_traces
            where
                changed_traces.run_id = {{ run_id }}
                and changed_traces.rank = {{ rank }}
                {%- if changes == 'new' %}
                and changed_traces.change = 'new'
                {%- endif %}
                {%- if grain == 'partition' %}
                and (
                    {{ iteration }} between changed_traces.first_iteration
                    and changed_traces.last_iteration
                    or ({{ iteration }} is null and changed_traces.has_steps)
                )
                {%- endif %}
        )
    {%- else -%}
        {{ exceptions.raise_compiler_error(
            "incremental_traces: grain must be 'trace', 'partition' or 'rank', not '"
            ~ grain ~ "'"
        ) }}
    {%- endif -%}
{%- endmacro %}

{#- Model-body filter: which input rows to compute from. `true` in full and
    rebuild modes. For 'trace', rows of new traces; for 'partition' and
    'rank', every row (of any trace) in a run x rank (x iteration) that a new
    or gone trace touches, since such aggregates span traces. The ref to
    stg_lake__traces is taken outside the mode test so that dbt records the
    dependency when it parses the model. -#}
{% macro incremental_traces_where(grain, trace_id='trace_id', run_id='run_id', rank='rank', iteration='iteration') -%}
    {%- if model.resource_type != 'unit_test' -%}
        {%- set traces = ref('stg_lake__traces') -%}
    {%- endif -%}
    {%- if execute and incremental_traces_mode() == 'incremental' -%}
        {{ incremental_traces_touch(
            grain, 'new' if grain == 'trace' else 'any', trace_id, run_id, rank, iteration
        ) }}
    {%- else -%}
        true
    {%- endif -%}
{%- endmacro %}

{#- Pre-hook: delete the rows that a new or gone trace touches (all rows in
    rebuild mode, none in full mode). -#}
{% macro incremental_traces_delete(grain, trace_id='trace_id', run_id='run_id', rank='rank', iteration='iteration') -%}
    {%- set mode = incremental_traces_mode() -%}
    {%- if mode == 'rebuild' -%}
        {%- do incremental_traces_log_rebuild() -%}
        delete from {{ this }}
    {%- elif mode == 'incremental' -%}
        delete from {{ this }}
        where {{ incremental_traces_touch(grain, 'any', trace_id, run_id, rank, iteration) }}
    {%- else -%}
        select 1 as nothing_to_delete
    {%- endif -%}
{%- endmacro %}

{#- Pre-hook of int_kernel_names_classified (grain: distinct kernel name):
    when a trace is gone, delete the names no remaining trace launches. New
    names are added by the model body (names of new traces not yet known). -#}
{% macro incremental_traces_delete_names(kernel_categories) -%}
    {%- set mode = incremental_traces_mode() -%}
    {%- if mode == 'rebuild' -%}
        {%- do incremental_traces_log_rebuild() -%}
        delete from {{ this }}
    {%- elif mode == 'incremental' and incremental_traces_gone_count() > 0 -%}
        delete from {{ this }} as known
        where not exists (
            select 1
            from {{ ref('stg_lake__slices') }} as slices
            where
                slices.category = known.category
                and slices.name = known.name
                and slices.category in (
                    {%- for category in kernel_categories %}
                        '{{ category }}'{{ "," if not loop.last }}
                    {%- endfor %}
                )
        )
    {%- else -%}
        select 1 as nothing_to_delete
    {%- endif -%}
{%- endmacro %}

{#- Say why a build of an incremental model takes as long as a full one. -#}
{% macro incremental_traces_log_rebuild() -%}
    {%- do log(
        'incremental_traces: rebuilding ' ~ this.identifier ~ ' from every trace (no ledger '
        ~ 'yet, or the model, a model or seed upstream, or a var in '
        ~ 'incremental_rebuild_vars changed since the last build)',
        info=true,
    ) -%}
{%- endmacro %}

{#- How many traces of the ledger are no longer in the lake (run time only). -#}
{% macro incremental_traces_gone_count() -%}
    {%- set result = run_query(
        "select count(*) from " ~ incremental_traces_changed() ~ " as changed_traces "
        ~ "where changed_traces.change = 'gone'"
    ) -%}
    {{- return(result.columns[0].values()[0]) -}}
{%- endmacro %}

{#- Post-hook: record the traces this build of the model reflects. -#}
{% macro incremental_traces_record() -%}
    create or replace table {{ incremental_traces_ledger() }} as
    select
        trace_id,
        content_hash,
        run_id,
        rank,
        iteration,
        min_profiler_step,
        max_profiler_step,
        '{{ incremental_traces_fingerprint() }}' as code_fingerprint
    from {{ ref('stg_lake__traces') }}
{%- endmacro %}
