"""Arrow schemas of the raw lake tables: the one place their columns are defined.

The lake mirrors Perfetto trace processor's model (``slice``, ``flow``,
``thread``, ``process``) so that PerfettoSQL knowledge carries over, with
three departures that the warehouse needs:

* every row carries ``run_id``, ``rank`` and ``trace_id`` so that one lake
  holds many runs, ranks and iterations;
* ``slice_id``, ``track_id`` and ``parent_id`` are local to one trace file
  (the key of a slice is ``(trace_id, slice_id)``), so that files can be
  loaded independently and in parallel;
* times are integer nanoseconds on the absolute clock
  (``baseTimeNanoseconds`` + event ``ts``), never floats in microseconds.

Writers (native and Perfetto engines) produce tables with exactly these
schemas; the dbt sources read them back. Keep the two in step: the dbt
source YAML documents the same columns.
"""

from __future__ import annotations

import pyarrow as pa

from tracehouse.core.warehouse import LAKE_FORMAT  # noqa: F401 - re-exported for the writers

from .annotation_context import ANNOTATION_RANGES
from .slice_context import CONTEXT_FIELDS

TRACES = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),
        ("rank", pa.int64()),
        ("world_size", pa.int64()),
        ("iteration", pa.int64()),  # from the folder name (iteration_N), else NULL
        ("min_profiler_step", pa.int64()),
        ("max_profiler_step", pa.int64()),
        ("path", pa.string()),
        ("file_format", pa.string()),  # kineto_json | kineto_json_gz
        ("layout", pa.string()),  # megatron_traceviz | tensorboard | hta | generic
        ("size_bytes", pa.int64()),
        ("uncompressed_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("content_hash", pa.string()),
        ("engine", pa.string()),  # native | perfetto
        ("schema_version", pa.int64()),
        ("base_time_ns", pa.int64()),
        ("trace_start_ns", pa.int64()),
        ("trace_end_ns", pa.int64()),
        ("event_count", pa.int64()),
        ("slice_count", pa.int64()),
        ("flow_count", pa.int64()),
        ("unpaired_flow_events", pa.int64()),
        ("partial_overlap_count", pa.int64()),
        ("backend", pa.string()),
        ("host_name", pa.string()),
        ("kineto_trace_id", pa.string()),
        ("distributed_info", pa.string()),  # JSON
        ("device_properties", pa.string()),  # JSON
        ("has_op_shapes", pa.bool_()),  # CPU ops carry Input Dims (record_shapes)
        ("ingested_at", pa.timestamp("us", tz="UTC")),
        ("lake_format", pa.int64()),  # warehouse.LAKE_FORMAT when written; NULL: before 2
    ]
)

#: ``slices`` as the parsers produce it: the events of the file.
PARSED_SLICES = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("trace_id", pa.string()),
        ("slice_id", pa.int64()),
        ("ts", pa.int64()),  # absolute ns
        ("dur", pa.int64()),  # ns; 0 for instant events
        ("phase", pa.string()),  # X (complete) | i (instant)
        ("category", pa.string()),
        ("name", pa.string()),
        ("track_id", pa.int64()),  # threads.track_id of the same trace
        ("depth", pa.int64()),
        ("parent_id", pa.int64()),
        ("is_partial_overlap", pa.bool_()),
        ("correlation", pa.int64()),
        ("external_id", pa.int64()),
        ("device", pa.int64()),
        ("stream", pa.int64()),
        ("collective_name", pa.string()),
        ("process_group_name", pa.string()),
        ("process_group_desc", pa.string()),
        ("process_group_ranks", pa.list_(pa.int64())),
        ("group_size", pa.int64()),
        ("in_msg_nelems", pa.int64()),
        ("out_msg_nelems", pa.int64()),
        ("dtype", pa.string()),
        ("args", pa.string()),  # the whole args object as JSON
    ]
)

#: ``slices`` as the lake holds it: the parsed columns, then the context that
#: the slice's own trace decides (track kind, frame parts, launch of GPU
#: work), added by the lake writer (ingest/slice_context.py).
SLICES = pa.schema([*PARSED_SLICES, *(pa.field(n, t) for n, t in CONTEXT_FIELDS)])

FLOWS = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("trace_id", pa.string()),
        ("flow_id", pa.int64()),  # the id of the s/f pair in the file
        ("category", pa.string()),  # ac2g | fwdbwd | ...
        ("slice_out", pa.int64()),
        ("slice_in", pa.int64()),
        ("ts_out", pa.int64()),
        ("ts_in", pa.int64()),
    ]
)

THREADS = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("trace_id", pa.string()),
        ("track_id", pa.int64()),
        ("pid", pa.string()),  # Kineto writes ints, and strings such as "Spans"
        ("tid", pa.string()),
        ("thread_name", pa.string()),
        ("thread_sort_index", pa.int64()),
        ("is_gpu", pa.bool_()),
        ("slice_count", pa.int64()),
    ]
)

PROCESSES = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("trace_id", pa.string()),
        ("pid", pa.string()),
        ("process_name", pa.string()),
        ("process_labels", pa.string()),
        ("process_sort_index", pa.int64()),
    ]
)

PROCESS_GROUPS = pa.schema(
    [
        ("run_id", pa.string()),
        ("rank", pa.int64()),
        ("trace_id", pa.string()),
        ("source", pa.string()),  # pg_config
        ("pg_name", pa.string()),
        ("pg_desc", pa.string()),
        ("backend_config", pa.string()),
        ("pg_size", pa.int64()),
        ("ranks", pa.list_(pa.int64())),
    ]
)

INGEST_ERRORS = pa.schema(
    [
        ("run_id", pa.string()),
        ("path", pa.string()),
        ("error_kind", pa.string()),
        ("message", pa.string()),
        ("hint", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("detected_at", pa.timestamp("us", tz="UTC")),
    ]
)

TOPOLOGY_GROUPS = pa.schema(
    [
        ("run_id", pa.string()),
        ("topology_id", pa.string()),  # one topology file of the run
        ("source", pa.string()),  # topology_json | traceviz_txt | generated
        ("kind", pa.string()),  # tp | pp | dp | dp_cp | cp | mp | ep | etp | edp | ...
        ("group_index", pa.int64()),  # position of the group in its kind, 0-based
        ("ranks", pa.list_(pa.int64())),  # global ranks, in the file's order
        ("group_size", pa.int64()),
        ("pg_name", pa.string()),  # torch's process-group name, when the file says
        ("pg_desc", pa.string()),
        ("world_size", pa.int64()),  # the layout, repeated on every row (NULL: unknown)
        ("tp_size", pa.int64()),
        ("pp_size", pa.int64()),
        ("vpp_size", pa.int64()),
        ("cp_size", pa.int64()),
        ("ep_size", pa.int64()),
        ("etp_size", pa.int64()),
        ("dp_size", pa.int64()),
        ("edp_size", pa.int64()),
        ("rank_order", pa.string()),  # Megatron's --order, fastest-varying first
        ("path", pa.string()),
        ("content_hash", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)

PP_TIMER_EVENTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),  # id of the PP-timer file within the run (not a trace)
        ("rank", pa.int64()),  # global rank, from the file name
        ("pp_rank", pa.int64()),
        ("pp_size", pa.int64()),
        ("vpp_size", pa.int64()),
        ("tp_cp_dp_rank", pa.int64()),  # rank in the tensor x context x data-parallel group
        ("iteration", pa.int64()),  # from the tracehouse metadata, NULL for original files
        ("vpp_chunk", pa.int64()),  # model chunk, 0 without VPP
        ("microbatch", pa.int64()),  # microbatch within the chunk
        ("phase", pa.string()),  # forward | backward
        ("start_ns", pa.int64()),  # after the rank's post-barrier timer start
        ("end_ns", pa.int64()),
        ("dur_ns", pa.int64()),
        ("total_execution_ns", pa.int64()),  # total-execution-time, NULL if absent
        ("clock", pa.string()),  # cuda_event | cpu_perf_counter | simulated | NULL (original)
        ("timer_format", pa.string()),  # tracehouse | original
        ("path", pa.string()),
        ("content_hash", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)

COMM_LOG_EVENTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),  # id of the comm-log file within the run (not a trace)
        ("rank", pa.int64()),  # the logging rank (src_rank; else the file name's)
        ("seq", pa.int64()),  # position of the record in the rank's log, 0-based
        ("call_id", pa.int64()),  # the log's own counter
        ("op", pa.string()),  # as logged: all_reduce, batch_isend, reduce_scatter_tensor, ...
        ("collective", pa.string()),  # family: all_reduce | all_gather | reduce_scatter | ...
        ("is_setup", pa.bool_()),  # init_process_group / new_group records (no traffic)
        ("is_p2p", pa.bool_()),
        ("is_send", pa.bool_()),  # P2P: this rank sends (else receives)
        ("group_ranks", pa.list_(pa.int64())),  # global ranks of the group (NULL for P2P)
        ("group_size", pa.int64()),
        ("peer_rank", pa.int64()),  # P2P: the other rank (global)
        ("root_rank", pa.int64()),  # broadcast/reduce/gather/scatter root (global), if logged
        ("dtype", pa.string()),  # torch.float32, ...
        ("shape", pa.list_(pa.int64())),
        ("nelems", pa.int64()),  # elements this rank puts in
        ("out_nelems", pa.int64()),  # elements this rank gets out
        ("bytes", pa.int64()),  # the collective's full buffer (nccl-tests' size)
        ("reduce_op", pa.string()),
        ("group_desc", pa.string()),  # Megatron's group description, tracehouse logs only
        ("call_site", pa.string()),  # innermost megatron/ frame, tracehouse logs only
        ("is_emulated", pa.bool_()),  # call site mirrors Megatron-LM's training loop
        ("in_step", pa.bool_()),  # inside the training iteration (NULL: the log does not say)
        ("batch_idx", pa.int64()),  # batch_isend/irecv: position in the batch
        ("batch_size", pa.int64()),
        ("coalesced", pa.int64()),  # ops in the coalesced call this record belongs to
        ("coalesced_index", pa.int64()),  # position in that call (0: the call's first op)
        ("log_format", pa.string()),  # tracehouse | genstack
        ("world_size", pa.int64()),  # from config.json beside the log, NULL if absent
        ("tp_size", pa.int64()),
        ("pp_size", pa.int64()),
        ("dp_size", pa.int64()),
        ("cp_size", pa.int64()),
        ("model_size", pa.string()),
        ("record", pa.string()),  # the whole record as JSON
        ("path", pa.string()),
        ("content_hash", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)

MODEL_CONFIGS = pa.schema(
    [
        ("run_id", pa.string()),
        ("trace_id", pa.string()),  # id of the config file within the run (not a trace)
        # Megatron-LM's arguments, as its num_floating_point_operations reads them
        ("num_layers", pa.int64()),
        ("hidden_size", pa.int64()),
        ("num_attention_heads", pa.int64()),
        ("seq_length", pa.int64()),
        ("global_batch_size", pa.int64()),
        ("ffn_hidden_size", pa.int64()),  # NULL: Megatron's default (4h; SwiGLU 8h/3 to 64)
        ("num_query_groups", pa.int64()),  # GQA groups, NULL without GQA
        ("kv_channels", pa.int64()),  # NULL: hidden / heads
        ("padded_vocab_size", pa.int64()),  # NULL: vocab_size padded as Megatron does
        ("vocab_size", pa.int64()),
        ("make_vocab_size_divisible_by", pa.int64()),
        ("tensor_model_parallel_size", pa.int64()),
        ("num_experts", pa.int64()),  # NULL: dense
        ("moe_router_topk", pa.int64()),
        ("moe_ffn_hidden_size", pa.int64()),
        ("moe_layer_freq", pa.int64()),  # every k-th layer is MoE (an int only)
        ("moe_shared_expert_intermediate_size", pa.int64()),
        ("micro_batch_size", pa.int64()),
        ("swiglu", pa.bool_()),
        ("group_query_attention", pa.bool_()),
        ("params_dtype", pa.string()),  # torch.bfloat16, ...
        ("stated_flops_per_iteration", pa.float64()),  # the producer's own figure, if given
        ("config_source", pa.string()),  # megatron | simulate | ...
        ("config", pa.string()),  # every argument of the file, as JSON
        ("path", pa.string()),
        ("content_hash", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)

#: Tables written once per loaded trace, in commit order: ``traces`` last,
#: because a row there is what marks the trace as loaded.
TRACE_TABLES: dict[str, pa.Schema] = {
    "slices": SLICES,
    "flows": FLOWS,
    "threads": THREADS,
    "processes": PROCESSES,
    "process_groups": PROCESS_GROUPS,
    # Derived by the lake writer from the slices (ingest/annotation_context.py).
    "annotation_ranges": ANNOTATION_RANGES,
    "traces": TRACES,
}

#: Every raw table of the lake and its schema.
LAKE_TABLES: dict[str, pa.Schema] = {
    **TRACE_TABLES,
    "ingest_errors": INGEST_ERRORS,
    # One file per topology file beside the traces (ingest/topology.py).
    "topology_groups": TOPOLOGY_GROUPS,
    # One file per PP-timer log (event_times_PP*.json) beside the traces (ingest/pp_timer.py).
    "pp_timer_events": PP_TIMER_EVENTS,
    # One file per comm log (comm_log_rank_<r>.json: Genstack's or `tracehouse commtrace`'s).
    "comm_log_events": COMM_LOG_EVENTS,
    # One file per model/batch config (model_config*.json) beside the traces
    # (ingest/model_config.py).
    "model_configs": MODEL_CONFIGS,
}
