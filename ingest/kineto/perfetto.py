"""``--engine perfetto``: the same lake tables, extracted by Perfetto's trace processor.

The native parser (:mod:`ingest.kineto.native`) is the default and the reference.
This engine loads each file into ``perfetto.trace_processor.TraceProcessor``
and reads Perfetto's own tables back (``slice``, ``args``, ``thread_track``,
``thread``, ``process``, ``flow``, ``stats``), so the two engines can be
checked against each other and PerfettoSQL users get Perfetto's reading of
a trace.

Where the trace processor comes from, first match wins:

1. ``bin_path`` (``--trace-processor-bin``), else ``$TRACE_PROCESSOR_BIN``:
   a ``trace_processor_shell`` binary, started per file;
2. ``$TRACE_PROCESSOR_REMOTE``: an already running trace processor session
   (a unix socket path or session name, as ``trace_processor --remote``
   takes). perfetto's RPC client only queries, so the trace is sent over the
   same RPC (``TPM_APPEND_TRACE_DATA``/``TPM_FINALIZE_TRACE_DATA``); one file
   at a time, serialised by a lock file;
3. the binary the ``perfetto`` package pins, downloaded on first use and
   cached under ``~/.local/share/perfetto``. Offline that download fails
   (curl cannot resolve the host): the file fails with ``engine_unavailable``
   and a hint, never a hang or a crash.

How Perfetto's model maps onto the lake:

* times: Perfetto's JSON importer turns ``ts``/``dur`` from microseconds into
  integer nanoseconds (``llround(ts * 1000)``) and ignores the top-level
  ``baseTimeNanoseconds`` key (v52 to v58 only interpret ``traceEvents``,
  ``systemTraceEvents``, ``displayTimeUnit``, itself ignored, and ``metadata``),
  so absolute ns = ``baseTimeNanoseconds`` + Perfetto's ``ts``, as in the
  native engine. Non-integral epoch-sized microseconds can differ from the
  native engine's exact conversion by a nanosecond;
* slices: ids are rebuilt as 0..n-1 in Perfetto's slice order (time order,
  not file order); ``depth``/``parent_id`` are Perfetto's, mapped to the new
  ids; ``args`` is rebuilt as JSON from the ``args`` table (``args.<key>``
  rows; Perfetto drops null values and empty arrays/objects, gaps they leave
  in arrays come back as ``null``); the typed columns are read from it with
  the native engine's rules. Thread identity is Kineto's ``(pid, tid)``:
  Perfetto replaces string pids/tids by interned ids and a ``tid`` of 0 by
  the pid, so each Perfetto thread is mapped back to the key the file uses;
  global (``"s": "g"``) instants, which Perfetto puts on a global track, get
  the ``(pid, tid)`` of the matching instant event in the file;
* flows: Perfetto's ``flow`` (``slice_out``, ``slice_in``) with the slice ids
  remapped; the Kineto flow id and the ``s``/``f`` timestamps come from the
  file's matching ``s``/``f`` pair (NULL id and slice times when none
  matches);
* metadata (``distributedInfo``, ``deviceProperties``,
  ``baseTimeNanoseconds``, sort indexes, process labels, event counts,
  ``ProfilerStep#N`` numbers) is read from the file with msgspec, through the
  native parser's helpers.

Smaller differences seen on the shared traces (besides partial overlaps):

* non-integral microsecond ``ts``/``dur`` can differ by 1 ns (Perfetto
  rounds ``ts * 1000`` in floating point; the native engine is exact);
* a zero-length slice that starts exactly where another zero-length slice
  of its thread starts is nested under it by Perfetto, a sibling natively;
* Perfetto coerces a tid outside uint32 (Kineto writes negative tids) to 0
  and then to the pid, so those slices land on the process's main thread;
* ``args`` loses empty arrays/objects and nulls (see above); string
  pids/tids give a thread or process no name (Perfetto names them after the
  string; that name is dropped to match the native engine).

**The documented difference between the engines: partially overlapping
slices.** A complete event that starts inside a slice of its thread and ends
after it cannot nest. The native engine keeps it and flags it. Perfetto up to
v56 (the v52 wasm of the test fixture included) *drops* it (stat
``slice_drop_overlapping_complete_event``): those slices are missing here, so
``slice_count`` is lower than the native engine's by that many. Perfetto v57+
*spills* it onto an overflow track (stat
``slice_spill_overlapping_complete_event``, track type
``thread_overlapping_slice``): it is kept, flagged ``is_partial_overlap`` and
its ``depth``/``parent_id`` are relative to that overflow track. Either way
``traces.partial_overlap_count`` holds Perfetto's count of such slices
(dropped + spilled), and ``event_count - slice_count`` shows what was lost.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import io
import os
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..trace_types import ParsedTrace, TraceError, TraceFile
from .arrow_tables import json_column, lake_table, raw_lengths, repeat
from .columns import GPU_CATEGORIES, profiler_steps, typed_args
from .decode import KinetoFile, decode_args, decode_distributed, decode_kineto, to_ns
from .engine import KinetoEngine
from .read import read_trace_bytes
from .trace_rows import (
    LoadedFile,
    TraceSummary,
    has_op_shapes,
    process_groups,
    processes_table,
    resolve_rank,
    threads_table,
    traces_row,
)

ENV_BIN = "TRACE_PROCESSOR_BIN"
ENV_REMOTE = "TRACE_PROCESSOR_REMOTE"
HINT = "pass --trace-processor-bin or set TRACE_PROCESSOR_BIN"

#: Perfetto stats that count complete events which could not nest on their thread.
DROP_STAT = "slice_drop_overlapping_complete_event"
SPILL_STAT = "slice_spill_overlapping_complete_event"
_OVERFLOW_TRACK = "thread_overlapping_slice"
_RPC_CHUNK = 8 << 20

Key = tuple[object, object]  # Kineto's (pid, tid), values as the file has them


@dataclass(frozen=True)
class Backend:
    """Where the trace processor runs: a local ``shell`` binary or a ``remote`` session."""

    kind: str  # shell | remote
    where: str


# --------------------------------------------------------------------------- backend


def resolve_backend(bin_path: str | None) -> Backend:
    """The trace processor to use, or ``TraceError("engine_unavailable")`` saying why none.

    Checks paths before starting anything, so a wrong path fails at once.
    """
    if bin_path:
        return Backend("shell", _check_binary(bin_path, "--trace-processor-bin"))
    env_bin = os.environ.get(ENV_BIN)
    if env_bin:
        return Backend("shell", _check_binary(env_bin, f"${ENV_BIN}"))
    remote = os.environ.get(ENV_REMOTE)
    if remote:
        return Backend("remote", remote)
    return Backend("shell", _download_prebuilt())


def _check_binary(path: str, given_by: str) -> str:
    full = os.path.expanduser(path)
    if not os.path.isfile(full):
        raise TraceError("engine_unavailable", f"no trace_processor_shell at {path!r} "
                         f"(from {given_by}): no such file", HINT)
    if not os.access(full, os.X_OK):
        raise TraceError("engine_unavailable", f"trace_processor_shell {path!r} (from "
                         f"{given_by}) is not executable", f"chmod +x it, or {HINT}")
    return full


@contextlib.contextmanager
def _stderr_to(target: Any) -> Iterator[None]:
    """Send file descriptor 2 (and so subprocesses' stderr) to ``target`` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(target.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _download_prebuilt() -> str:
    """The ``perfetto`` package's pinned trace_processor_shell (cached, else downloaded).

    curl's output is captured so that, offline, the user sees one clean line
    per file instead of curl's progress bar and error.
    """
    from perfetto.prebuilts.manifests.trace_processor_shell import (
        TRACE_PROCESSOR_SHELL_MANIFEST,
    )
    from perfetto.prebuilts.perfetto_prebuilts import get_perfetto_prebuilt

    with tempfile.TemporaryFile() as log:
        try:
            with _stderr_to(log), contextlib.redirect_stdout(io.StringIO()):
                path = get_perfetto_prebuilt(TRACE_PROCESSOR_SHELL_MANIFEST)
        except Exception as exc:  # noqa: BLE001 - curl, network, platform: all "unavailable"
            log.seek(0)
            lines = [ln.strip() for ln in log.read().decode("utf-8", "replace").splitlines()
                     if ln.strip() and not ln.strip().startswith("#")]
            detail = lines[-1] if lines else f"{type(exc).__name__}: {exc}"
            raise TraceError("engine_unavailable", "no trace_processor_shell: the perfetto "
                             f"package could not download its pinned binary ({detail})",
                             f"{HINT} (offline machines need a local binary)") from exc
    if not path or not os.path.isfile(path):
        raise TraceError("engine_unavailable", "no trace_processor_shell for this platform "
                         "in the perfetto package", HINT)
    return path


@contextlib.contextmanager
def open_trace_processor(backend: Backend, source: TraceFile, raw: bytes) -> Iterator[Any]:
    """A TraceProcessor with the file loaded; closed (shell stopped) on exit."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    from perfetto.trace_processor.api import TraceProcessorException

    if backend.kind == "remote":
        with _session_lock(backend.where):
            try:
                tp = TraceProcessor(remote=backend.where)
            except Exception as exc:  # noqa: BLE001
                raise TraceError("engine_unavailable", f"cannot reach the trace processor "
                                 f"session {backend.where!r} (${ENV_REMOTE}): {exc}",
                                 f"start that session, unset {ENV_REMOTE}, or {HINT}") from exc
            try:
                _rpc_load(tp, raw)
                yield tp
            finally:
                tp.close()
        return

    config = TraceProcessorConfig(bin_path=backend.where)
    try:
        with open(source.path, "rb") as handle:  # a file object: no URI parsing of the path
            tp = TraceProcessor(trace=handle, config=config)
    except TraceProcessorException as exc:
        text = str(exc)
        if "Failed while parsing trace" in text:
            raise TraceError("perfetto_parse_error", f"Perfetto could not parse the trace: "
                             f"{text}", "the native engine (--engine native) may load "
                             "it") from exc
        raise TraceError("engine_unavailable", f"trace_processor_shell {backend.where!r} "
                         f"did not start: {text}", HINT) from exc
    except OSError as exc:
        raise TraceError("engine_unavailable", f"cannot run trace_processor_shell "
                         f"{backend.where!r}: {exc}", HINT) from exc
    except Exception as exc:  # noqa: BLE001 - the package raises bare Exception too
        raise TraceError("engine_unavailable", f"trace_processor_shell {backend.where!r} "
                         f"failed: {type(exc).__name__}: {exc}", HINT) from exc
    try:
        yield tp
    finally:
        tp.close()


@contextlib.contextmanager
def _session_lock(address: str) -> Iterator[None]:
    """One trace at a time per remote session: loading a trace replaces the previous one."""
    digest = hashlib.blake2b(address.encode(), digest_size=8).hexdigest()
    lock_path = os.path.join(tempfile.gettempdir(), f"tracehouse-tp-{digest}.lock")
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _rpc_load(tp: Any, raw: bytes) -> None:
    """Send a trace to a remote session over the trace processor RPC protocol.

    perfetto's Python RPC client only implements queries; this speaks the
    two loading requests of the same protocol (a TraceProcessorRpcStream per
    request, one length-delimited TraceProcessorRpc per reply).
    """
    backend = tp._backend  # the RPC client (TraceProcessorUnix/TraceProcessorRpc)
    protos = backend.protos
    rpc = protos.TraceProcessorRpc

    def call(fill: Any) -> Any:
        stream = protos.TraceProcessorRpcStream()
        fill(stream.msg.add())
        backend.transport.send(stream.SerializeToString())
        reply = rpc()
        reply.ParseFromString(_read_frame(backend.transport))
        if reply.HasField("fatal_error"):
            raise TraceError("engine_unavailable", f"trace processor session error: "
                             f"{reply.fatal_error}", HINT)
        return reply

    def append(chunk: bytes) -> Any:
        def fill(req: Any) -> None:
            req.request = rpc.TPM_APPEND_TRACE_DATA
            req.append_trace_data = chunk
        return call(fill).append_result

    def finalize(req: Any) -> None:
        req.request = rpc.TPM_FINALIZE_TRACE_DATA

    for start in range(0, len(raw), _RPC_CHUNK):
        result = append(raw[start:start + _RPC_CHUNK])
        if result.error:
            raise TraceError("perfetto_parse_error", f"Perfetto could not parse the trace: "
                             f"{result.error}", "the native engine (--engine native) may "
                             "load it")
    result = call(finalize).finalize_data_result
    if result.error:
        raise TraceError("perfetto_parse_error", f"Perfetto could not parse the trace: "
                         f"{result.error}", "the native engine (--engine native) may load it")


def _read_frame(transport: Any) -> bytes:
    """One ``msg`` field (tag 0x0A, varint length, payload) of a TraceProcessorRpcStream."""
    tag = transport.read(1)[0]
    if tag != 0x0A:
        raise TraceError("engine_unavailable", f"unexpected byte {tag:#x} from the trace "
                         "processor session", HINT)
    length = shift = 0
    while True:
        byte = transport.read(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return transport.read(length)


def _query(tp: Any, sql: str) -> dict[str, list[Any]]:
    """A query's result as one Python list per column."""
    result = tp.query(sql)
    names = list(result.column_names)
    width = len(names)
    cells = result.cells
    return {name: list(cells[i::width]) if width else [] for i, name in enumerate(names)}


# --------------------------------------------------------------------------- file side


@dataclass
class _FileFacts:
    """What the file itself says, for metadata and for mapping Perfetto's rows back."""

    keys: set[Key]
    instants: dict[str, list[tuple[int, Key]]]  # name -> [(ts ns, key)] of i/I events
    flow_events: int
    flow_pairs: dict[tuple[object, Key], list[tuple[int, int, object, Key]]]
    thread_sort: dict[Key, int | None]
    proc_labels: dict[object, str | None]
    proc_sort: dict[object, int | None]


def _has_value(raw: object) -> bool:
    """A raw JSON field that is present and not ``null``."""
    return len(raw) > 0 and bytes(raw) != b"null"


def _file_facts(trace: KinetoFile) -> _FileFacts:
    keys: set[Key] = set()
    instants: dict[str, list[tuple[int, Key]]] = defaultdict(list)
    starts: dict[tuple[object, object], list[tuple[int, Key]]] = defaultdict(list)
    finishes: dict[tuple[object, object], list[tuple[int, Key]]] = defaultdict(list)
    thread_sort: dict[Key, int | None] = {}
    proc_labels: dict[object, str | None] = {}
    proc_sort: dict[object, int | None] = {}
    flow_events = 0
    for ev in trace.traceEvents:
        ph = ev.ph
        key = (ev.pid, ev.tid)
        if ph in ("X", "i", "I"):
            keys.add(key)
            if ph != "X" and _has_value(ev.ts) and ev.name is not None:
                instants[ev.name].append((int(to_ns([ev.ts], 0, "ts")[0]), key))
        elif ph in ("s", "f"):
            keys.add(key)
            if not _has_value(ev.ts) or ev.id is None:
                continue
            flow_events += 1
            ts = int(to_ns([ev.ts], 0, "flow ts")[0])
            (starts if ph == "s" else finishes)[(ev.cat, ev.id)].append((ts, key))
        elif ph == "M":
            if ev.name == "thread_name":
                keys.add(key)
            elif ev.name == "thread_sort_index":
                thread_sort[key] = decode_args(ev.args).sort_index
            elif ev.name == "process_labels":
                proc_labels[ev.pid] = decode_args(ev.args).labels
            elif ev.name == "process_sort_index":
                proc_sort[ev.pid] = decode_args(ev.args).sort_index
    # k-th start with k-th finish of the same (cat, id), in time order (as the native engine).
    flow_pairs: dict[tuple[object, Key], list[tuple[int, int, object, Key]]] = (
        defaultdict(list))
    for (cat, fid), outs in starts.items():
        ins = sorted(finishes.get((cat, fid), []), key=lambda p: p[0])
        for (s_ts, s_key), (f_ts, f_key) in zip(sorted(outs, key=lambda p: p[0]), ins,
                                                strict=False):
            flow_pairs[(cat, f_key)].append((f_ts, s_ts, fid, s_key))
    for pairs in flow_pairs.values():
        pairs.sort(key=lambda p: (p[0], p[1]))
    return _FileFacts(keys, instants, flow_events, flow_pairs, thread_sort, proc_labels,
                      proc_sort)


def _kineto_key(pid: object, tid: object, process_name: object, thread_name: object,
                known: set[Key]) -> Key:
    """The file's ``(pid, tid)`` for a Perfetto thread.

    Perfetto stores a string pid/tid as an interned id (and names the process
    or thread after the string) and turns ``tid`` 0 into the pid.
    """
    pids = [pid] + ([process_name] if isinstance(process_name, str) else [])
    tids = [tid] + ([thread_name] if isinstance(thread_name, str) else [])
    if tid == pid:
        tids.append(0)
    for p in pids:
        for t in tids:
            if (p, t) in known:
                return (p, t)
    return (pid, tid)


# --------------------------------------------------------------------------- args


_ARG_STEP = re.compile(r"\.([^.\[]*)|\[(\d+)\]")


def _arg_path(key: str) -> list[str | int] | None:
    """``args.grid[0]`` -> ``["grid", 0]``; None for keys outside ``args``."""
    if key != "args" and not key.startswith(("args.", "args[")):
        return None
    rest = key[4:]
    steps: list[str | int] = []
    pos = 0
    while pos < len(rest):
        match = _ARG_STEP.match(rest, pos)
        if match is None:  # a key holding "[" or "."; keep the rest as one name
            return [*steps, rest[pos:].removeprefix(".")]
        steps.append(match.group(1) if match.group(2) is None else int(match.group(2)))
        pos = match.end()
    return steps


def _arg_value(value_type: str, int_value: Any, string_value: Any, real_value: Any) -> Any:
    if value_type == "bool":
        return bool(int_value)
    if value_type in ("int", "uint", "pointer"):
        return int_value
    if value_type == "real":
        return real_value
    if value_type == "json" and isinstance(string_value, str):
        try:
            return msgspec.json.decode(string_value)
        except msgspec.DecodeError:
            return string_value
    return string_value


def _put(node: Any, step: str | int, value: Any) -> Any:
    """Set ``node[step]`` (growing lists with nulls); return what is there now."""
    if isinstance(step, int):
        if not isinstance(node, list):
            return None
        if len(node) <= step:
            node.extend([None] * (step + 1 - len(node)))
        if node[step] is None:
            node[step] = value
        return node[step]
    if not isinstance(node, dict):
        return None
    return node.setdefault(step, value)


def _rebuild_args(rows: list[tuple[list[str | int], Any]]) -> bytes:
    """JSON text of an args object from its flattened ``(path, value)`` rows."""
    if rows and rows[0][0] == []:
        return msgspec.json.encode(rows[0][1])
    root: Any = [] if rows and isinstance(rows[0][0][0], int) else {}
    for path, value in rows:
        node = root
        for i, step in enumerate(path):
            last = i == len(path) - 1
            child: Any = value if last else ([] if isinstance(path[i + 1], int) else {})
            node = _put(node, step, child)
            if node is None:
                break
    return msgspec.json.encode(root)


def _args_by_set(tp: Any) -> dict[int, bytes]:
    rows = _query(tp, "select arg_set_id, key, value_type, int_value, string_value, "
                      "real_value from args where arg_set_id in (select arg_set_id from "
                      "slice where arg_set_id is not null) order by arg_set_id, id")
    grouped: dict[int, list[tuple[list[str | int], Any]]] = defaultdict(list)
    for set_id, key, vtype, ival, sval, rval in zip(rows["arg_set_id"], rows["key"],
                                                     rows["value_type"], rows["int_value"],
                                                     rows["string_value"], rows["real_value"],
                                                     strict=True):
        path = _arg_path(key)
        if path is not None:
            grouped[int(set_id)].append((path, _arg_value(vtype, ival, sval, rval)))
    return {set_id: _rebuild_args(items) for set_id, items in grouped.items()}


# --------------------------------------------------------------------------- the engine


def parse_with_trace_processor(source: TraceFile, loaded: LoadedFile, *,
                               bin_path: str | None, data: bytes | None = None) -> ParsedTrace:
    """Turn one Kineto trace into rows of every per-trace lake table, through Perfetto.

    ``data`` is the file's JSON text when the caller already has it (it is
    read again otherwise). Raises :class:`TraceError` (``engine_unavailable``
    when no trace processor can be had; the native parser's kinds for a
    malformed file; ``perfetto_parse_error`` when Perfetto rejects it).
    """
    backend = resolve_backend(bin_path)
    try:
        raw = source.path.read_bytes()
    except OSError as exc:
        raise TraceError("unreadable", f"cannot read the file: {exc.strerror}",
                         "check the path and its permissions") from exc
    if data is None:
        _, data, _ = read_trace_bytes(source.path)
    trace = decode_kineto(data)
    del data
    if not trace.traceEvents:
        raise TraceError("empty", "the trace has no events", "profile at least one step")
    dist = decode_distributed(trace.distributedInfo)
    rank, rank_source = resolve_rank(dist, source)
    facts = _file_facts(trace)

    with open_trace_processor(backend, source, raw) as tp:
        del raw
        slices_q = _query(tp, "select s.id, s.ts, s.dur, s.category, s.name, s.depth, "
                              "s.parent_id, s.arg_set_id, t.type as track_type, tt.utid "
                              "from slice s join track t on s.track_id = t.id "
                              "left join thread_track tt on s.track_id = tt.id order by s.id")
        threads_q = _query(tp, "select t.utid, t.tid, t.name as thread_name, p.pid, "
                               "p.name as process_name from thread t "
                               "left join process p using (upid) order by t.utid")
        flows_q = _query(tp, "select f.slice_out, f.slice_in, extract_arg(f.arg_set_id, "
                             "'cat') as cat from flow f order by f.id")
        stats_q = _query(tp, f"select name, sum(value) as value from stats where name in "
                             f"('{DROP_STAT}', '{SPILL_STAT}') group by name")
        args_json = _args_by_set(tp)

    parsed = _assemble(source, trace, dist, rank, facts, slices_q, threads_q, flows_q,
                       stats_q, args_json, loaded)
    parsed.world_size = dist.world_size
    parsed.rank_source = rank_source
    return parsed


def _assemble(source, trace, dist, rank, facts, slices_q, threads_q, flows_q, stats_q,
              args_json, loaded: LoadedFile) -> ParsedTrace:
    run_id = source.run_id
    trace_id = loaded.trace_id
    base_ns = trace.baseTimeNanoseconds or 0
    n = len(slices_q["id"])

    # Perfetto threads -> the file's (pid, tid) keys.
    thread_key: dict[int, Key] = {}
    thread_name: dict[Key, str | None] = {}
    process_name: dict[object, str | None] = {}
    for utid, tid, tname, pid, pname in zip(threads_q["utid"], threads_q["tid"],
                                            threads_q["thread_name"], threads_q["pid"],
                                            threads_q["process_name"], strict=True):
        key = _kineto_key(pid, tid, pname, tname, facts.keys)
        thread_key[int(utid)] = key
        # A string pid/tid also becomes the name of Perfetto's process/thread;
        # only names that the trace's metadata gave are kept.
        if isinstance(tname, str) and tname and tname != key[1]:
            thread_name.setdefault(key, tname)
        if isinstance(pname, str) and pname and pname != key[0]:
            process_name.setdefault(key[0], pname)

    # Slices: new ids 0..n-1 in Perfetto's order, tracks by (pid, tid).
    local_id = {int(sid): i for i, sid in enumerate(slices_q["id"])}
    ts = np.asarray(slices_q["ts"], dtype=np.int64).reshape(n)
    dur = np.asarray(slices_q["dur"], dtype=np.int64).reshape(n)
    tracks: dict[Key, int] = {}
    track = np.empty(n, dtype=np.int64)
    phase: list[str] = []
    used_instants: set[tuple[str, int]] = set()
    for i, (name, utid) in enumerate(zip(slices_q["name"], slices_q["utid"], strict=True)):
        instant_key = (_match_instant(facts, name, int(ts[i]), used_instants)
                       if dur[i] == 0 else None)
        if utid is not None:
            key = thread_key.get(int(utid), (None, None))
        else:  # a global or process instant: the file says which (pid, tid) wrote it
            key = instant_key if instant_key is not None else (None, None)
        phase.append("i" if instant_key is not None else "X")
        track[i] = tracks.setdefault(key, len(tracks))
    for key in thread_name:  # named threads without slices, as the native engine keeps them
        if key in facts.keys:
            tracks.setdefault(key, len(tracks))

    parent = np.asarray([local_id.get(int(p), -1) if p is not None else -1
                         for p in slices_q["parent_id"]], dtype=np.int64).reshape(n)
    partial = np.asarray([t == _OVERFLOW_TRACK for t in slices_q["track_type"]],
                         dtype=bool).reshape(n)
    raws = [args_json.get(int(a), b"") if a is not None else b"" for a in slices_q["arg_set_id"]]
    category = pa.array(slices_q["category"], type=pa.string())
    name = pa.array(slices_q["name"], type=pa.string())
    lengths = raw_lengths(raws)
    typed = typed_args(category, raws, lengths)
    # From the file, not from Perfetto's slices: Perfetto may drop ProfilerStep#N
    # slices (partial overlaps), and the steps identify the trace in the run.
    steps = profiler_steps(pa.array([ev.name for ev in trace.traceEvents if ev.ph == "X"],
                                     type=pa.string()))
    slices = lake_table(
        {
            "run_id": repeat(run_id, n, pa.string()),
            "rank": repeat(rank, n, pa.int64()),
            "trace_id": repeat(trace_id, n, pa.string()),
            "slice_id": pa.array(np.arange(n, dtype=np.int64)),
            "ts": pa.array(ts + base_ns),
            "dur": pa.array(dur),
            "phase": pa.array(phase, type=pa.string()),
            "category": category,
            "name": name,
            "track_id": pa.array(track),
            "depth": pa.array(slices_q["depth"], type=pa.int64()),
            "parent_id": pa.array(parent, mask=parent < 0),
            "is_partial_overlap": pa.array(partial),
            **typed,
            "args": json_column(raws, "args", lengths),
        },
        schema.PARSED_SLICES,
    )

    flows = _flows(flows_q, facts, local_id, ts, dur, track, tracks, base_ns, run_id, rank,
                   trace_id)
    threads, processes = _threads_and_processes(tracks, thread_name, process_name, facts,
                                                category, track, run_id, rank, trace_id)
    groups = process_groups(dist, run_id, rank, trace_id, slices)

    stats = dict(zip(stats_q["name"], stats_q["value"], strict=True))
    overlapping = int(stats.get(DROP_STAT) or 0) + int(stats.get(SPILL_STAT) or 0)
    if n:
        start, end = int(ts.min()) + base_ns, int((ts + dur).max()) + base_ns
    else:
        start = end = None
    traces = traces_row(source, trace, dist, loaded, TraceSummary(
        engine=KinetoEngine.PERFETTO.lake_name, rank=rank, steps=steps, start_ns=start,
        end_ns=end, event_count=len(trace.traceEvents), slice_count=n,
        flow_count=flows.num_rows,
        unpaired_flow_events=max(facts.flow_events - 2 * flows.num_rows, 0),
        partial_overlap_count=overlapping,
        has_op_shapes=has_op_shapes(trace.record_shapes, slices),
    ))
    return ParsedTrace(
        trace_id=trace_id,
        rank=rank,
        iteration=source.iteration_hint,
        profiler_steps=tuple(steps),
        tables={
            "slices": slices,
            "flows": flows,
            "threads": threads,
            "processes": processes,
            "process_groups": groups,
            "traces": traces,
        },
    )


def _match_instant(facts: _FileFacts, name: object, ts: int,
                   used: set[tuple[str, int]]) -> Key | None:
    """The (pid, tid) of the file's instant event with this name at this time, if any."""
    if not isinstance(name, str):
        return None
    candidates = facts.instants.get(name)
    if not candidates:
        return None
    for position, (event_ts, key) in enumerate(candidates):
        if abs(event_ts - ts) <= 1 and (name, position) not in used:
            used.add((name, position))
            return key
    return None


def _flows(flows_q, facts, local_id, ts, dur, track, tracks, base_ns, run_id, rank, trace_id):
    """Perfetto's flows with remapped slice ids, and the file's flow id and s/f times."""
    key_of_track = {tid: key for key, tid in tracks.items()}
    outs: list[int] = []
    ins: list[int] = []
    ids: list[object] = []
    cats: list[object] = []
    ts_out: list[int] = []
    ts_in: list[int] = []
    taken: set[tuple[object, ...]] = set()
    for slice_out, slice_in, cat in zip(flows_q["slice_out"], flows_q["slice_in"],
                                        flows_q["cat"], strict=True):
        out = local_id.get(int(slice_out)) if slice_out is not None else None
        inn = local_id.get(int(slice_in)) if slice_in is not None else None
        if out is None or inn is None:
            continue
        match = _match_flow(facts, cat, key_of_track[int(track[inn])],
                            key_of_track[int(track[out])], ts, dur, out, inn, taken)
        outs.append(out)
        ins.append(inn)
        cats.append(cat)
        if match is None:
            ids.append(None)
            ts_out.append(int(ts[out]) + base_ns)
            ts_in.append(int(ts[inn]) + base_ns)
        else:
            f_ts, s_ts, fid = match
            ids.append(fid if isinstance(fid, int) else None)
            ts_out.append(s_ts + base_ns)
            ts_in.append(f_ts + base_ns)
    k = len(outs)
    return lake_table(
        {
            "run_id": repeat(run_id, k, pa.string()),
            "rank": repeat(rank, k, pa.int64()),
            "trace_id": repeat(trace_id, k, pa.string()),
            "flow_id": pa.array(ids, type=pa.int64()),
            "category": pa.array(cats, type=pa.string()),
            "slice_out": pa.array(outs, type=pa.int64()),
            "slice_in": pa.array(ins, type=pa.int64()),
            "ts_out": pa.array(ts_out, type=pa.int64()),
            "ts_in": pa.array(ts_in, type=pa.int64()),
        },
        schema.FLOWS,
    )


def _match_flow(facts, cat, in_key, out_key, ts, dur, out, inn, taken):
    """The file's (f ts, s ts, id) of the s/f pair Perfetto bound to these two slices."""
    pairs = facts.flow_pairs.get((cat, in_key))
    if not pairs:
        return None
    in_start, in_end = int(ts[inn]), int(ts[inn] + dur[inn])
    out_start, out_end = int(ts[out]), int(ts[out] + dur[out])
    # An "f" binds to the slice enclosing it, or (without bp "e") to the next one.
    first = bisect.bisect_left(pairs, (in_start - 1,))
    first = max(first - 1, 0)
    for f_ts, s_ts, fid, s_key in pairs[first:]:
        if f_ts > in_end + 1:
            break
        if s_key != out_key or not out_start - 1 <= s_ts <= out_end + 1:
            continue
        token = (cat, in_key, f_ts, s_ts, fid)
        if token in taken:
            continue
        taken.add(token)
        return f_ts, s_ts, fid
    return None


def _threads_and_processes(tracks, thread_name, process_name, facts, category, track, run_id,
                           rank, trace_id):
    n_tracks = len(tracks)
    counts = (np.bincount(track, minlength=n_tracks) if n_tracks
              else np.zeros(0, np.int64))
    is_gpu = np.zeros(n_tracks, dtype=bool)
    gpu = pc.fill_null(pc.is_in(category, pa.array(sorted(GPU_CATEGORIES))), False)
    gpu = np.asarray(gpu.to_numpy(zero_copy_only=False), dtype=bool)
    is_gpu[track[gpu]] = True
    keys = list(tracks)  # insertion order == track_id
    threads = threads_table(run_id, rank, trace_id, keys, thread_name, facts.thread_sort,
                            is_gpu, counts)
    pids = list(dict.fromkeys([pid for pid, _ in keys if pid is not None]
                              + [pid for pid in process_name
                                 if pid in facts.proc_labels or pid in facts.proc_sort]))
    processes = processes_table(run_id, rank, trace_id, pids, process_name, facts.proc_labels,
                                facts.proc_sort)
    return threads, processes
