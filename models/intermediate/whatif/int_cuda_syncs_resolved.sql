{#
    One row per CUDA synchronisation the profiler recorded and the GPU op it
    waited for (trace_id, sync_slice_id, src_slice_id): Kineto's `cuda_sync`
    events (recorded with `_ExperimentalConfig(enable_cuda_sync_events=True)`,
    ../shared/research/efficiency_whatif_viewer.md §4), resolved the way
    HTA's critical-path analysis resolves them, so the replay
    (int_replay_edges_typed) types them as edges instead of inferring waits
    from the measured order:

      * `Stream Wait Event` (cudaStreamWaitEvent): the GPU op launched last
        before the event's record onto the record's stream (src_slice_id)
        -> the first GPU op launched onto the waiting stream, from the same
        thread, after the wait call (dst_slice_id);
      * `Stream Sync` (cudaStreamSynchronize): the GPU op launched last on
        that stream before the call -> the call's end (call_slice_id);
      * `Context Sync` (cudaDeviceSynchronize): the same for every stream of
        the device, one row per stream;
      * `Event Sync` (cudaEventSynchronize; Kineto also reports
        cudaEventQuery so): the GPU op launched last before the record onto
        the record's stream -> the call's end.

    The record is the cudaEventRecord whose correlation the event names
    (`wait_on_cuda_event_record_corr_id`), on `wait_on_stream`. CUDA 13
    builds leave both -1 (kineto #1552; the vendored H200 captures): a
    Stream Wait Event then takes the last cudaEventRecord call its thread
    made before the wait (PyTorch's `Stream.wait_stream` records on the
    other stream and waits at once), and the record's stream is that of
    the GPU op the thread launched last before it on another stream than
    the waiting one; `is_record_inferred` says so. An Event Sync with no
    record named is left unresolved (src_slice_id null, a row still): its
    event may have been recorded anywhere before. Times are the trace's
    own clock (every input is this trace's), so the model is per trace
    (materialized per_trace): keyed by trace_id.
#}

-- depends_on: {{ ref('int_traces_loaded') }}

{#- The traces to compute, read once for every scan (macros/per_trace.sql). -#}
{%- set pending = traces_pending() %}

{#- Of those, the traces with a sync event, read now (a scan of the slices'
    category column alone), and every scan below reads only their files:
    most captures record none (the option is opt-in), and with none the
    model reads no runtime call and no kernel at all. Within the query the
    same restriction did not prune: DuckDB still scanned every trace's
    runtime calls and materialised every kernel (2.1 CPU s of a 256 x 2
    lake without a sync event, against the ~0.3 s of the category scan;
    benchmarks/README.md, "On by default"). -#}
{%- set traces_with_syncs = traces_with_rows('slices', pending, "category = 'cuda_sync'") %}
{%- set traces_with_syncs_filter = trace_filter(traces_with_syncs) %}

with

{# Two scans, so that the runtime calls (most of a trace's rows) are read
   without their args, and only in traces with sync events: one scan of both
   categories with args cost 20.7 s of a 1,024-rank what-if build that has
   no sync event at all (benchmarks/README.md, whatif.py). #}
sync_events as (
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        category,
        name,
        correlation,
        device,
        stream,
        args,
        ts_ns,
        end_ns
    from {{ lake_scan('slices', traces_with_syncs) }}
    where category = 'cuda_sync' and {{ traces_with_syncs_filter }}
),

runtime_calls as (
    select * from sync_events
    union all
    select
        run_id,
        rank,
        trace_id,
        slice_id,
        track_id,
        category,
        name,
        correlation,
        device,
        stream,
        cast(null as varchar) as args,
        ts_ns,
        end_ns
    from {{ lake_scan('slices', traces_with_syncs) }}
    where
        category = 'cuda_runtime'
        and (name like 'cudaEventRecord%' or name in (
            {%- for call in var('replay_sync_event_calls') %}
                '{{ call }}'{{ "," if not loop.last }}
            {%- endfor %}
        ))
        and {{ traces_with_syncs_filter }}
        and trace_id in (select sync_events.trace_id from sync_events)
),

kernels as (
    select
        trace_id,
        slice_id,
        device,
        stream,
        launch_track_id,
        launch_ts_ns
    from {{ ref('int_kernels_classified') }}
    where launch_ts_ns is not null and {{ traces_with_syncs_filter }}
),

records as (
    select
        trace_id,
        slice_id,
        track_id,
        correlation,
        ts_ns
    from runtime_calls
    where category = 'cuda_runtime' and name like 'cudaEventRecord%'
),

{# Kineto writes -1 for an argument it could not fill: missing. #}
syncs as (
    select
        events.run_id,
        events.rank,
        events.trace_id,
        events.slice_id as sync_slice_id,
        events.name as sync_kind,
        events.device,
        nullif(events.stream, -1) as sync_stream,
        nullif(
            cast({{ json_text('events.args', 'wait_on_cuda_event_record_corr_id') }} as bigint), -1
        ) as record_correlation,
        nullif(cast({{ json_text('events.args', 'wait_on_stream') }} as bigint), -1)
            as record_stream,
        calls.slice_id as call_slice_id,
        calls.track_id as call_track_id,
        calls.ts_ns as call_ts_ns
    from runtime_calls as events
    inner join runtime_calls as calls
        on
            events.trace_id = calls.trace_id
            and events.correlation = calls.correlation
            and calls.category = 'cuda_runtime'
    where events.category = 'cuda_sync'
),

{# The record a wait or event sync names, else (a wait only) the last
    record call of the waiting thread before the wait. #}
records_found as (
    select
        syncs.trace_id,
        syncs.sync_slice_id,
        coalesce(
            min(named.ts_ns),
            max(latest.ts_ns) filter (where syncs.sync_kind = 'Stream Wait Event')
        ) as record_ts_ns,
        min(named.ts_ns) is null as is_record_inferred
    from syncs
    left join records as named
        on
            syncs.trace_id = named.trace_id
            and syncs.record_correlation = named.correlation
    left join records as latest
        on
            syncs.trace_id = latest.trace_id
            and syncs.call_track_id = latest.track_id
            and syncs.call_ts_ns > latest.ts_ns
            and syncs.record_correlation is null
    where syncs.sync_kind in ('Stream Wait Event', 'Event Sync')
    group by 1, 2
),

{# The GPU op launched last before the record: on the named stream, else
    on any stream but the waiting one. #}
recorded_ops as (
    select
        syncs.trace_id,
        syncs.sync_slice_id,
        arg_max(kernels.slice_id, (kernels.launch_ts_ns, kernels.slice_id)) as src_slice_id
    from syncs
    inner join records_found
        on
            syncs.trace_id = records_found.trace_id
            and syncs.sync_slice_id = records_found.sync_slice_id
    inner join kernels
        on
            syncs.trace_id = kernels.trace_id
            and syncs.device = kernels.device
            and records_found.record_ts_ns > kernels.launch_ts_ns
            and (
                syncs.record_stream = kernels.stream
                or (syncs.record_stream is null and syncs.sync_stream != kernels.stream)
            )
    group by 1, 2
),

waiting_ops as (
    select
        syncs.trace_id,
        syncs.sync_slice_id,
        arg_min(kernels.slice_id, (kernels.launch_ts_ns, kernels.slice_id)) as dst_slice_id
    from syncs
    inner join kernels
        on
            syncs.trace_id = kernels.trace_id
            and syncs.device = kernels.device
            and syncs.sync_stream = kernels.stream
            and syncs.call_track_id = kernels.launch_track_id
            and syncs.call_ts_ns <= kernels.launch_ts_ns
    where syncs.sync_kind = 'Stream Wait Event'
    group by 1, 2
),

{# A stream or context sync waits for the last op launched on each stream
    it covers. #}
synced_ops as (
    select
        syncs.trace_id,
        syncs.sync_slice_id,
        kernels.stream,
        arg_max(kernels.slice_id, (kernels.launch_ts_ns, kernels.slice_id)) as src_slice_id
    from syncs
    inner join kernels
        on
            syncs.trace_id = kernels.trace_id
            and syncs.device = kernels.device
            and syncs.call_ts_ns > kernels.launch_ts_ns
            and (syncs.sync_kind = 'Context Sync' or syncs.sync_stream = kernels.stream)
    where syncs.sync_kind in ('Stream Sync', 'Context Sync')
    group by 1, 2, 3
),

sources as (
    select
        trace_id,
        sync_slice_id,
        src_slice_id
    from recorded_ops
    union all
    select
        trace_id,
        sync_slice_id,
        src_slice_id
    from synced_ops
),

final as (
    select
        syncs.run_id,
        syncs.rank,
        syncs.trace_id,
        syncs.sync_slice_id,
        syncs.sync_kind,
        syncs.call_slice_id,
        sources.src_slice_id,
        waiting_ops.dst_slice_id,
        coalesce(
            records_found.is_record_inferred and sources.src_slice_id is not null, false
        ) as is_record_inferred
    from syncs
    left join sources
        on
            syncs.trace_id = sources.trace_id
            and syncs.sync_slice_id = sources.sync_slice_id
    left join records_found
        on
            syncs.trace_id = records_found.trace_id
            and syncs.sync_slice_id = records_found.sync_slice_id
    left join waiting_ops
        on
            syncs.trace_id = waiting_ops.trace_id
            and syncs.sync_slice_id = waiting_ops.sync_slice_id
)

select * from final
