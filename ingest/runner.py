"""Ingest orchestration: discover, skip what is loaded, parse in parallel, commit.

Traces are the bulk; the small files beside them (topology dumps into
``topology_groups``, PP-timer logs into ``pp_timer_events``) are loaded in
the parent process after the traces, each by one atomic rename.

Work split: worker processes each take one file at a time (read, hash,
decompress, parse, write temporaries), so memory per worker is bounded by
the largest single file, never by the run. The parent process alone
decides and commits (duplicate checks, renames, error records) under an
exclusive lock on the warehouse, so two concurrent ingests serialise
instead of corrupting each other, and a crash or Ctrl-C leaves only
temporaries that the next ingest removes.
"""

from __future__ import annotations

import collections
import datetime as dt
import fcntl
import hashlib
import os
import signal
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from tracehouse.core.publish import build_lock
from tracehouse.core.warehouse import Warehouse

from . import lake
from .comm_log import load_comm_log_file, read_comm_log_manifest
from .discover import Discovery, discover
from .kineto.engine import (
    DECODER_ENV,
    KinetoEngine,
    decoder_override,
    native_decoder,
    scanner_built,
)
from .kineto.native import parse_kineto
from .kineto.read import read_trace_bytes
from .kineto.trace_rows import LoadedFile
from .memory import system_arrow_pool
from .model_config import load_model_config_file, read_model_config_manifest
from .no_pandas import keep_pandas_out
from .pp_timer import load_pp_timer_file, read_pp_timer_manifest
from .progress import Progress
from .shard import STALE_AFTER_S, Shard
from .spark_tasks import run_tasks_in_spark
from .topology import load_topology_file, read_topology_manifest
from .trace_types import TraceError, TraceFile, display_path


@dataclass
class Loaded:
    path: str
    run_id: str
    trace_id: str
    rank: int
    slices: int
    flows: int
    seconds: float


@dataclass
class Failed:
    path: str
    run_id: str
    kind: str
    message: str
    hint: str

    def line(self) -> str:
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"error: {self.path}: {self.message}{hint}"


@dataclass
class IngestResult:
    """What one ingest did, per file."""

    loaded: list[Loaded] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    failed: list[Failed] = field(default_factory=list)
    topologies: list[tuple[str, str, int]] = field(default_factory=list)  # (path, run, rows)
    pp_timers: list[tuple[str, str, int]] = field(default_factory=list)  # (path, run, rows)
    comm_logs: list[tuple[str, str, int]] = field(default_factory=list)  # (path, run, rows)
    model_configs: list[tuple[str, str, int]] = field(default_factory=list)  # (path, run, rows)
    #: Paths given under which discovery found nothing to load.
    empty_paths: list[str] = field(default_factory=list)
    bytes_read: int = 0
    uncompressed_bytes: int = 0
    #: Bytes parsed per kind of input (Kineto JSON, Nsight SQLite), for the summary.
    bytes_by_input: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self, into: object | None = None) -> str:
        """The closing line of an ingest: every kind of file loaded, skipped and failed.

        Traces are not the only files ingest loads; counting only them made a
        run whose topology and PP-timer logs loaded look as if it did less.
        """
        mb = self.uncompressed_bytes / 1e6
        rate = mb / self.seconds if self.seconds > 0 else 0.0
        where = f" into {into}" if into is not None else ""
        comm = f", {len(self.comm_logs)} comm log(s)" if self.comm_logs else ""
        if self.model_configs:
            comm += f", {len(self.model_configs)} model config(s)"
        read = " + ".join(f"{size / 1e6:.1f} MB of {kind}"
                          for kind, size in sorted(self.bytes_by_input.items())) or "0.0 MB"
        return (f"loaded {len(self.loaded)} trace(s) ({read}, {rate:.1f} MB/s), "
                f"{len(self.topologies)} topology file(s), {len(self.pp_timers)} PP-timer "
                f"file(s){comm}; skipped {len(self.skipped)}, failed {len(self.failed)}{where}")

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


@dataclass
class _Task:
    source: TraceFile
    warehouse_root: str
    token: str
    known_hash: str | None
    #: The engine a worker runs (KinetoEngine.parser: never SPARK).
    engine: KinetoEngine
    trace_processor_bin: str | None


@dataclass
class _Outcome:
    source: TraceFile
    status: str  # parsed | unchanged | failed
    trace_id: str = ""
    rank: int = -1
    iteration: int | None = None
    steps: tuple[int, ...] = ()
    content_hash: str = ""
    pending: list[tuple[Path, Path]] = field(default_factory=list)
    slices: int = 0
    flows: int = 0
    uncompressed_bytes: int = 0
    seconds: float = 0.0
    error: tuple[str, str, str] | None = None  # kind, message, hint
    world_size: int | None = None
    rank_source: str = "distributedInfo"
    #: The other GPUs of one Nsight export (one trace each); they land or fail together.
    siblings: list[_Outcome] = field(default_factory=list)
    #: Already counted by the progress bar (held until its run's job was decided).
    counted: bool = False


def trace_id_for(run_id: str, content_hash: str) -> str:
    """Stable id of a file's content within a run: reloading the same bytes is idempotent."""
    return hashlib.blake2b(f"{run_id}\0{content_hash}".encode(), digest_size=8).hexdigest()


def _load_one(task: _Task) -> _Outcome:
    """Worker body: never raises, every failure becomes an outcome."""
    started = time.perf_counter()
    source = task.source
    if source.layout == "nsys":
        return _load_nsys(task, started)
    with system_arrow_pool():
        return _load_kineto(task, started)


def _load_kineto(task: _Task, started: float) -> _Outcome:
    source = task.source
    try:
        raw, text, file_format = read_trace_bytes(source.path)
        content_hash = hashlib.blake2b(raw, digest_size=16).hexdigest()
        del raw  # the gzip bytes; the JSON text is all the parsers need
        if task.known_hash == content_hash:
            return _Outcome(source, "unchanged", content_hash=content_hash)
        trace_id = trace_id_for(source.run_id, content_hash)
        loaded = LoadedFile(trace_id=trace_id, content_hash=content_hash,
                            uncompressed_bytes=len(text), file_format=file_format,
                            ingested_at=dt.datetime.now(dt.timezone.utc))
        if task.engine is KinetoEngine.PERFETTO:
            from .kineto.perfetto import parse_with_trace_processor  # this engine only

            del text  # the engine reads the file itself
            parsed = parse_with_trace_processor(source, loaded,
                                                bin_path=task.trace_processor_bin)
        else:
            # Hand the only reference to the parser, which drops the text as soon
            # as it is decoded: it is the biggest object while the tables are built.
            handed = [text]
            del text
            parsed = parse_kineto(handed.pop(), source, loaded, task.engine)
        pending = lake.write_trace_tmp(Warehouse(Path(task.warehouse_root)), source.run_id,
                                       trace_id, parsed.tables, task.token)
        return _Outcome(
            source, "parsed", trace_id=trace_id, rank=parsed.rank, iteration=parsed.iteration,
            steps=parsed.profiler_steps, content_hash=content_hash, pending=pending,
            slices=parsed.tables["slices"].num_rows, flows=parsed.tables["flows"].num_rows,
            world_size=parsed.world_size, rank_source=parsed.rank_source,
            uncompressed_bytes=parsed.tables["traces"]["uncompressed_bytes"][0].as_py(),
            seconds=time.perf_counter() - started,
        )
    except TraceError as exc:
        return _Outcome(source, "failed", error=(exc.kind, exc.message, exc.hint))
    except MemoryError:
        return _Outcome(source, "failed", error=("out_of_memory", "ran out of memory parsing "
                        "this file", "use fewer workers (-j) for very large traces"))
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return _Outcome(source, "failed", error=("internal", f"unexpected error: {detail}",
                        "please report this with the file"))


def _load_nsys(task: _Task, started: float) -> _Outcome:
    """Worker body for an Nsight export: one outcome per GPU, the first holding the rest."""
    # Imported here, not with this module: the Nsight reader imports DuckDB (+24 MiB
    # of RSS in every ingest process, pool workers included, for Kineto-only runs).
    from .nsys.load import load_nsys_file
    from .nsys.write import write_gpu_tmp

    source = task.source
    try:
        wh = Warehouse(Path(task.warehouse_root))
        content_hash, written = load_nsys_file(
            source, task.known_hash, trace_id_for,
            write=lambda part: write_gpu_tmp(wh, source.run_id, part, task.token))
        if written is None:
            return _Outcome(source, "unchanged", content_hash=content_hash)
        outcomes: list[_Outcome] = []
        try:
            for index, gpu in enumerate(written):
                outcomes.append(_Outcome(
                    source, "parsed", trace_id=gpu.trace_id, rank=gpu.rank,
                    iteration=gpu.iteration, steps=gpu.profiler_steps,
                    content_hash=content_hash, pending=gpu.pending,
                    slices=gpu.slices, flows=gpu.flows,
                    uncompressed_bytes=source.size_bytes if index == 0 else 0,
                    seconds=time.perf_counter() - started))
        except BaseException:
            for outcome in outcomes:
                lake.discard(outcome.pending)
            raise
        outcomes[0].siblings = outcomes[1:]
        return outcomes[0]
    except TraceError as exc:
        return _Outcome(source, "failed", error=(exc.kind, exc.message, exc.hint))
    except MemoryError:
        return _Outcome(source, "failed", error=("out_of_memory", "ran out of memory parsing "
                        "this file", "use fewer workers (-j) for very large exports"))
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return _Outcome(source, "failed", error=("internal", f"unexpected error: {detail}",
                        "please report this with the file"))


@contextmanager
def warehouse_lock(warehouse: Warehouse, stream: TextIO,
                   shard: Shard | None = None) -> Iterator[None]:
    """Hold the warehouse's ingest lock; wait (and say so) if another ingest has it.

    A shard holds its own lock (:mod:`ingest.shard`): shards never wait for
    each other, and nothing relies on the lock across hosts.
    """
    warehouse.root.mkdir(parents=True, exist_ok=True)
    lock_file = warehouse.lock_file if shard is None else warehouse.root / shard.lock_name()
    with open(lock_file, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another ingest into {warehouse.root} to finish…",
                  file=stream, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _BuildTurn:
    """The build lock, taken shared before this ingest's first lake write and
    kept to its end (``held``): a running build finishes first, and no build
    starts until the ingest is done (tracehouse.core.publish.build_lock). An
    ingest whose traces are all unchanged waits for no build, unless it
    loads topology files (always reloaded) or changed side files."""

    def __init__(self, warehouse: Warehouse, held: ExitStack, stream: TextIO):
        self._warehouse = warehouse
        self._held = held
        self._stream = stream
        self._taken = False

    def take(self) -> None:
        if self._taken:
            return
        self._held.enter_context(build_lock(
            self._warehouse.root, shared=True,
            waiting=f"waiting for the build of {self._warehouse.root} to finish before "
                    "writing to its lake ...", stream=self._stream))
        self._taken = True


class _Committer:
    """Decides, in the parent process, whether a parsed trace may land, and lands it."""

    def __init__(self, warehouse: Warehouse, manifest: list[lake.ManifestEntry], token: str,
                 turn: _BuildTurn):
        self.warehouse = warehouse
        self.token = token
        self.start_writing = turn.take
        self.by_path = {(m.run_id, m.path): m for m in manifest}
        self.by_run: dict[str, list[lake.ManifestEntry]] = {}
        for entry in manifest:
            self.by_run.setdefault(entry.run_id, []).append(entry)
        #: The world sizes of each run's traces when this ingest began: a run that
        #: has one holds its job, and new traces of another job are refused.
        self.jobs_in_lake: dict[str, set[int]] = {}
        for entry in manifest:
            if entry.world_size is not None:
                self.jobs_in_lake.setdefault(entry.run_id, set()).add(entry.world_size)
        #: Every error record in the lake, by file name (see clear_errors).
        self._error_files = lake.error_files(warehouse)

    def known_hash(self, source: TraceFile, force: bool) -> str | None:
        entry = self.by_path.get((source.run_id, display_path(source.path)))
        if force or entry is None or not entry.is_current:
            return None  # parse it (again): an older lake format lacks derived columns
        return entry.content_hash

    def is_unchanged(self, source: TraceFile) -> bool:
        entry = self.by_path.get((source.run_id, display_path(source.path)))
        return (entry is not None and entry.is_current
                and entry.size_bytes == source.size_bytes and entry.mtime_ns == source.mtime_ns)

    def conflict(self, outcome: _Outcome) -> TraceError | None:
        path = display_path(outcome.source.path)
        steps = set(outcome.steps)
        for other in self.by_run.get(outcome.source.run_id, []):
            if other.path == path:
                continue
            if other.content_hash == outcome.content_hash:
                return TraceError("duplicate_trace", f"same content as {other.path}, already "
                                  f"loaded in run {other.run_id!r}",
                                  "remove the copy, or load it into another run with --run")
            if (outcome.world_size is not None and other.world_size is not None
                    and outcome.world_size != other.world_size):
                return TraceError("mixed_jobs", f"world size {outcome.world_size}, but run "
                                  f"{other.run_id!r} already holds {other.path} with world "
                                  f"size {other.world_size}: traces of different jobs",
                                  "load this job into its own run: " + _ingest_command(
                                      [path], job_run_name(other.run_id, outcome.world_size)))
            if other.rank != outcome.rank:
                continue
            if outcome.iteration is not None and other.iteration is not None:
                clash = outcome.iteration == other.iteration
            elif other.min_step is None or other.max_step is None:
                clash = not steps
            else:
                # Compare with the other's step range, never materialise it: a
                # stray "ProfilerStep#10000000000" must not cost a 10^10-element set.
                clash = any(other.min_step <= step <= other.max_step for step in steps)
            if clash:
                where = (f"iteration {outcome.iteration}" if outcome.iteration is not None
                         else "the same profiler steps")
                return TraceError("duplicate_rank", f"rank {outcome.rank} appears twice in run "
                                  f"{other.run_id!r} for {where}: already loaded from "
                                  f"{other.path}",
                                  "load the two jobs into different runs with --run, or "
                                  "remove the stray copy")
        return None

    def land(self, outcome: _Outcome, keep: frozenset[str] = frozenset()) -> None:
        """Commit one trace; ``keep``: trace ids of the same file landing with it
        (the GPUs of one Nsight export), never unloaded as older versions."""
        self.start_writing()
        source = outcome.source
        path = display_path(source.path)
        keep = keep | {outcome.trace_id}
        for previous in [e for e in self.by_run.get(source.run_id, [])
                         if e.path == path and (e.trace_id not in keep
                                                or e.trace_id == outcome.trace_id)]:
            if previous.trace_id != outcome.trace_id:
                # Unload the old version before committing the new one: a crash in
                # between leaves the path unloaded (the next run loads it), never
                # loaded twice (which no later run would notice).
                lake.remove_trace(self.warehouse, source.run_id, previous.trace_id)
            # The same id (the same bytes parsed again: --force, an older lake
            # format) has its files replaced by the commit: only its entry goes.
            self.by_run[source.run_id].remove(previous)
            self.by_path.pop((source.run_id, path), None)
        # The path's error records (in any run: the hint's --run loads it into
        # another) go before the commit: a crash in between leaves the path
        # neither loaded nor failed, and the next ingest loads it (a stale
        # error beside a loaded trace would stay, the file being unchanged).
        self.clear_errors(path)
        lake.commit(outcome.pending)
        steps = outcome.steps
        entry = lake.ManifestEntry(
            run_id=source.run_id, path=path, trace_id=outcome.trace_id, rank=outcome.rank,
            iteration=outcome.iteration, min_step=steps[0] if steps else None,
            max_step=steps[-1] if steps else None, size_bytes=source.size_bytes,
            mtime_ns=source.mtime_ns, content_hash=outcome.content_hash,
            world_size=outcome.world_size,
        )
        self.by_path[(source.run_id, path)] = entry
        self.by_run.setdefault(source.run_id, []).append(entry)

    def unload(self, run_id: str, path: str, trace_id: str) -> None:
        """Unload a trace this ingest landed, commit marker first (lake.remove_trace)."""
        lake.remove_trace(self.warehouse, run_id, trace_id)
        self.by_run[run_id] = [e for e in self.by_run.get(run_id, [])
                               if e.trace_id != trace_id]
        if (entry := self.by_path.get((run_id, path))) and entry.trace_id == trace_id:
            del self.by_path[(run_id, path)]

    def clear_errors(self, path: str) -> None:
        """Remove the error records of ``path`` in every run: it loads now."""
        for record in self._error_files.pop(lake.error_file_name(path), []):
            record.unlink(missing_ok=True)

    def reject(self, source: TraceFile, error: TraceError) -> Failed:
        self.start_writing()
        path = display_path(source.path)
        record = lake.record_error(self.warehouse, source.run_id, {
            "run_id": source.run_id, "path": path, "error_kind": error.kind,
            "message": error.message, "hint": error.hint, "size_bytes": source.size_bytes,
            "mtime_ns": source.mtime_ns, "detected_at": dt.datetime.now(dt.timezone.utc),
        }, self.token)
        records = self._error_files.setdefault(record.name, [])
        if record not in records:
            records.append(record)
        return Failed(path, source.run_id, error.kind, error.message, error.hint)


def ingest_paths(
    paths: list[Path],
    warehouse: Path | Warehouse | None = None,
    run: str | None = None,
    jobs: int = 1,
    force: bool = False,
    progress: bool = True,
    engine: KinetoEngine | str = KinetoEngine.NATIVE,
    trace_processor_bin: str | None = None,
    stream: TextIO | None = None,
    shard: Shard | None = None,
) -> IngestResult:
    """Load every trace under ``paths`` into the warehouse's lake.

    ``shard``: load only that shard's files (:mod:`ingest.shard`), safely
    beside the other shards writing the same lake. ``engine``: a
    :class:`~ingest.kineto.engine.KinetoEngine` or its name; ``spark``
    parses with tracehouse's own parser in Spark tasks
    (:mod:`ingest.spark_tasks`) instead of local worker processes; the
    driver commits, as for the other engines.

    Raises :class:`ingest.discover.DiscoveryError` for unusable arguments,
    :class:`~ingest.kineto.engine.UnknownEngine` for an engine (or a
    ``$TRACEHOUSE_DECODER``) that is none of the choices, and
    :class:`EngineUnavailable` for one that cannot run here;
    per-file problems are returned in ``IngestResult.failed`` (and recorded
    in ``ingest_errors``), never raised.
    """
    engine = KinetoEngine.parse(engine)
    parser = engine.parser
    # Decided once, here: a bad $TRACEHOUSE_DECODER is a usage error before any file.
    decoder = None if parser is KinetoEngine.PERFETTO else native_decoder(parser)
    stream = stream or sys.stderr
    wh = warehouse if isinstance(warehouse, Warehouse) else Warehouse.at(warehouse)
    started = time.perf_counter()
    found = discover([Path(p) for p in paths], run=run)
    # A path is empty when nothing loadable lies under it at all, not when this
    # shard's part of it is: with N shards over few files, a shard may own none
    # (the hash decides), and that shard's job is then done, not an error.
    empty_paths = [display_path(p) for p in found.paths_without_inputs([Path(p) for p in paths])]
    if shard is not None:
        found = _shard_files(found, shard)
    result = IngestResult(skipped=[(display_path(p), why) for p, why in found.skipped],
                          empty_paths=empty_paths)
    token = uuid.uuid4().hex[:12]

    # The pool is set before workers fork, so they inherit it (and _load_one sets it
    # again for workers started otherwise).
    with warehouse_lock(wh, stream, shard), ExitStack() as build_held:
        turn = _BuildTurn(wh, build_held, stream)
        lake.recover(wh, older_than_s=None if shard is None else STALE_AFTER_S,
                     before_removing_data=turn.take)
        committer = _Committer(wh, lake.read_manifest(wh), token, turn)
        todo: list[TraceFile] = []
        for source in found.traces:
            if not force and committer.is_unchanged(source):
                result.skipped.append((display_path(source.path), "already loaded, unchanged"))
            else:
                todo.append(source)
        tasks = [
            _Task(s, str(wh.root), token, committer.known_hash(s, force), parser,
                  trace_processor_bin)
            for s in todo
        ]
        if tasks:
            try:
                _check_engine_once(engine, decoder, tasks)
            except EngineUnavailable:
                # A usage error still leaves a readable lake, as any ingest does; it is
                # otherwise made with the files (_run_tasks), by a worker when pooled.
                lake.init_lake(wh)
                raise
        bar = Progress(len(todo), sum(s.size_bytes for s in todo), stream, enabled=progress)
        if parser is KinetoEngine.NATIVE and decoder is KinetoEngine.MSGSPEC and tasks:
            why = (f"${DECODER_ENV} asks for msgspec" if decoder_override() is not None
                   else "not built at install: no C compiler?")
            print(f"note: the compiled Kineto scanner is not in use ({why}); ingest runs "
                  "the pure-Python decoder, about 2-3x slower", file=stream, flush=True)
        deferred: list[_Outcome] = []
        # A run the lake holds no job of yet is decided when its last file is
        # parsed: one job lands, several are refused together (_NewRun).
        unparsed = collections.Counter(task.source.run_id for task in tasks)
        new_runs: dict[str, _NewRun] = {}
        try:
            if engine is KinetoEngine.SPARK:
                lake.init_lake(wh)
                outcomes = run_tasks_in_spark(_load_one, tasks, stream)
            else:
                outcomes = _run_tasks(tasks, jobs, prepare=partial(lake.init_lake, wh))
            for outcome in outcomes:
                run_id = outcome.source.run_id
                unparsed[run_id] -= 1
                if run_id in committer.jobs_in_lake:
                    _settle_or_defer(outcome, committer, result, bar, deferred)
                    continue
                new_run = new_runs.setdefault(run_id, _NewRun(run_id))
                new_run.take(outcome, committer, result, bar, deferred)
                if unparsed[run_id] == 0:
                    new_runs.pop(run_id).finish(committer, result, bar)
            _settle_single_process(deferred, committer, result, bar)
        except BaseException:
            _remove_temporaries(wh, token)
            raise
        finally:
            bar.close()
        _load_topologies(found.topologies, committer, result, stream, force)
        _load_pp_timers(found.pp_timers, committer, result, stream, force)
        _load_comm_logs(found.comm_logs, committer, result, stream, force)
        _load_model_configs(found.model_configs, committer, result, stream, force)
    result.seconds = time.perf_counter() - started
    return result


def _settle_or_defer(outcome: _Outcome, committer: _Committer, result: IngestResult,
                     bar: Progress, deferred: list[_Outcome]) -> None:
    if outcome.status == "parsed" and outcome.rank_source == "single_process":
        deferred.append(outcome)  # rank 0 only if alone in its run: decided last
    else:
        _settle(outcome, committer, result, bar)


class _NewRun:
    """The files of one run that held no job (no trace with a world size) when this
    ingest began, as they are parsed.

    Traces land as they come, so an interrupted ingest keeps them, while their
    world sizes agree. A trace of another job is held (parsed, not landed), as
    is every later one of that run. When the run's last file is parsed and it
    holds more than one job, no file that happened to come first takes the
    run: the traces landed by this ingest are unloaded again and every trace
    of every job is refused, each error naming each job's files and the
    ``--run`` that loads its own job (``<run>-world<N>``); the lake and the
    errors are the same whatever the order of the files or of the workers.
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        #: world size -> paths of the run's parsed traces of that job.
        self.jobs: dict[int, list[str]] = {}
        self.landed: list[_Outcome] = []
        self.held: list[_Outcome] = []

    def take(self, outcome: _Outcome, committer: _Committer, result: IngestResult,
             bar: Progress, deferred: list[_Outcome]) -> None:
        if outcome.status != "parsed" or outcome.world_size is None:
            _settle_or_defer(outcome, committer, result, bar, deferred)
            return
        self.jobs.setdefault(outcome.world_size, []).append(display_path(outcome.source.path))
        if len(self.jobs) > 1:
            self.held.append(outcome)
            bar.advance(outcome.source.size_bytes)
            outcome.counted = True
        elif _settle(outcome, committer, result, bar):
            self.landed.append(outcome)

    def finish(self, committer: _Committer, result: IngestResult, bar: Progress) -> None:
        if len(self.jobs) < 2:
            return
        described = ", ".join(f"world size {size} ({_listed(sorted(paths))})"
                              for size, paths in sorted(self.jobs.items()))
        message = (f"run {self.run_id!r} would mix {len(self.jobs)} jobs: {described}; "
                   "none of their traces stays loaded")
        for outcome in self.landed:
            _unland(outcome, committer, result)
        for outcome in self.held:
            lake.discard(outcome.pending)
        for outcome in sorted(self.landed + self.held, key=lambda o: str(o.source.path)):
            size = outcome.world_size
            assert size is not None
            hint = "load each job into its own run: " + _ingest_command(
                sorted(self.jobs[size]), job_run_name(self.run_id, size))
            failed = committer.reject(outcome.source, TraceError("mixed_jobs", message, hint))
            result.failed.append(failed)
            bar.advance(outcome.source.size_bytes, error=failed.line(), count=False)


def _unland(outcome: _Outcome, committer: _Committer, result: IngestResult) -> None:
    """Unload a trace this ingest landed (a run it would mix jobs in), and uncount it."""
    committer.unload(outcome.source.run_id, display_path(outcome.source.path), outcome.trace_id)
    result.loaded = [loaded for loaded in result.loaded if loaded.trace_id != outcome.trace_id
                     or loaded.run_id != outcome.source.run_id]
    result.bytes_read -= outcome.source.size_bytes
    result.uncompressed_bytes -= outcome.uncompressed_bytes
    kind = _input_kind(outcome.source)
    result.bytes_by_input[kind] -= outcome.uncompressed_bytes


def _listed(paths: list[str], most: int = 3) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


#: Files a hint's ``tracehouse ingest`` command lists before it stops naming them.
_COMMAND_FILES = 8


def _ingest_command(paths: list[str], run_id: str) -> str:
    """``tracehouse ingest FILE... --run NAME``, ready to paste for up to a few files."""
    import shlex

    files = " ".join(shlex.quote(path) for path in paths[:_COMMAND_FILES])
    if len(paths) > _COMMAND_FILES:
        return (f"tracehouse ingest {files} ... --run {run_id} (its {len(paths)} files, "
                f"{len(paths) - _COMMAND_FILES} more than shown)")
    return f"tracehouse ingest {files} --run {run_id}"


def job_run_name(run_id: str, world_size: int) -> str:
    """The run a hint suggests for one job of a run that holds several: ``<run>-world<N>``."""
    suffix = f"-world{world_size}"
    return run_id[:128 - len(suffix)] + suffix


def _shard_files(found: Discovery, shard: Shard) -> Discovery:
    """The part of a discovery that ``shard`` loads (traces and side files alike)."""
    return replace(
        found,
        traces=[t for t in found.traces if shard.owns(t.run_id, t.path)],
        topologies=[(p, r) for p, r in found.topologies if shard.owns(r, p)],
        pp_timers=[(p, r) for p, r in found.pp_timers if shard.owns(r, p)],
        model_configs=[(p, r) for p, r in found.model_configs if shard.owns(r, p)],
    )


class EngineUnavailable(Exception):
    """The engine asked for (``--engine perfetto``, ``--engine scanner``) cannot run
    here: a usage error (exit 2), about the command and not about any file, so no
    file is blamed, recorded in ``ingest_errors`` or counted."""

    def __init__(self, engine: KinetoEngine, error: TraceError, files: int):
        super().__init__(f"--engine {engine.value}: {error.message}; {files} file(s) not "
                         f"loaded (hint: {error.hint})")


def _check_engine_once(engine: KinetoEngine, decoder: KinetoEngine | None,
                       tasks: list[_Task]) -> None:
    """Find the trace processor (or the compiled scanner) before starting: without
    one, every file would fail the same way, so raise :class:`EngineUnavailable`
    once, before any file."""
    try:
        if engine is KinetoEngine.PERFETTO:
            # Imported only for this engine: its module (msgspec structs, the trace
            # processor's bindings) is ~1 MiB of RSS in every other ingest.
            from .kineto.perfetto import resolve_backend

            resolve_backend(tasks[0].trace_processor_bin)
        elif decoder is KinetoEngine.SCANNER and not scanner_built():
            raise TraceError("engine_unavailable", "the compiled Kineto scanner is not built "
                             "(no C compiler at install?)", "reinstall with a C compiler "
                             "(pip install -e .), or use --engine native or msgspec")
    except TraceError as exc:
        raise EngineUnavailable(engine, exc, len(tasks)) from exc


def _settle_single_process(deferred: list[_Outcome], committer: _Committer,
                           result: IngestResult, bar: Progress) -> None:
    """Land traces without any rank as rank 0, each only if alone in its run.

    A single-process trace (no ``distributedInfo`` rank, none in its name,
    no world above 1) is rank 0 of a one-rank run. Two such traces, or one
    beside other traces, in one run cannot be told apart: each is reported,
    naming the others, instead of guessing.
    """
    by_run: dict[str, list[_Outcome]] = {}
    for outcome in deferred:
        by_run.setdefault(outcome.source.run_id, []).append(outcome)
    for run_id, outcomes in by_run.items():
        paths = {display_path(o.source.path) for o in outcomes}
        others = [m.path for m in committer.by_run.get(run_id, []) if m.path not in paths]
        if len(outcomes) == 1 and not others:
            _settle(outcomes[0], committer, result, bar)
            continue
        for outcome in outcomes:
            mine = display_path(outcome.source.path)
            rest = sorted(paths - {mine}) + sorted(others)
            shown = ", ".join(rest[:3]) + (f" and {len(rest) - 3} more" if len(rest) > 3
                                           else "")
            lake.discard(outcome.pending)
            failed = committer.reject(outcome.source, TraceError(
                "no_rank", f"no rank in distributedInfo.rank nor in the file name, and run "
                f"{run_id!r} also holds {shown}: a trace without a rank is rank 0 only "
                "when it is alone in its run",
                "load each into its own run with --run NAME, or name the files rank-N.json"))
            result.failed.append(failed)
            bar.advance(outcome.source.size_bytes, error=failed.line(), count=not outcome.counted)


def _run_tasks(tasks: list[_Task], jobs: int,
               prepare: Callable[[], None]) -> Iterator[_Outcome]:
    """Outcomes in the order of ``tasks`` (so which of two clashing files lands does not
    depend on timing); in-process for one job (simpler to debug and profile).

    ``prepare`` (the lake's folders and schema files, :func:`lake.init_lake`) has
    run when the first outcome is yielded. With a pool it runs in a worker, beside
    the first files' parsing: the coordinator then never runs Parquet's writer,
    whose code pages were the rest of its peak (on dlrm_8rank with ``-j 2`` the
    coordinator, not a worker, set the ingest's peak), and a fresh lake's 24
    schema files are written while the other worker parses.
    """
    if jobs <= 1 or len(tasks) <= 1:
        prepare()
        for task in tasks:
            yield _load_one(task)
        return
    # Imported only for a pool: concurrent.futures.process and multiprocessing are
    # ~1.2 MiB of RSS that an ingest of one file (in process) never needs.
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)),
                             initializer=_leave_ctrl_c_to_parent) as pool:
        prepared: Future[None] | None = pool.submit(prepare)
        # Keep at most 2 files per worker in flight: bounded memory and temp space.
        # Finished outcomes wait for the earlier ones: they hold only paths of temporaries.
        queue = list(reversed(list(enumerate(tasks))))
        running: set[Future[_Outcome]] = set()
        index_of: dict[Future[_Outcome], int] = {}
        finished: dict[int, _Outcome] = {}
        next_index = 0
        try:
            while queue or running:
                while queue and len(running) < 2 * jobs:
                    index, task = queue.pop()
                    future = pool.submit(_load_one, task)
                    index_of[future] = index
                    running.add(future)
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finished[index_of.pop(future)] = future.result()
                if prepared is not None and next_index in finished:
                    prepared.result()  # the lake is ready before the first commit (or raises)
                    prepared = None
                while next_index in finished:
                    yield finished.pop(next_index)
                    next_index += 1
        except BaseException:
            for future in running:
                future.cancel()
            raise


def _leave_ctrl_c_to_parent() -> None:
    """Worker initializer: ignore SIGINT, and keep pandas out of the worker.

    Ctrl-C reaches the whole process group; the parent cancels what is queued,
    waits for the files in flight and removes their temporaries, while an
    interrupted idle worker would only print a traceback and break the pool.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_pandas_out()


def _settle(outcome: _Outcome, committer: _Committer, result: IngestResult,
            bar: Progress) -> bool:
    """Land a parsed trace, or record why not; True when it landed."""
    source = outcome.source
    path = display_path(source.path)
    count = not outcome.counted
    if outcome.status == "unchanged":
        result.skipped.append((path, "already loaded, same content"))
        bar.advance(source.size_bytes, f"unchanged {path}", count=count)
        return False
    error = None
    if outcome.status == "failed":
        assert outcome.error is not None
        error = TraceError(*outcome.error)
    else:
        parts = [outcome, *outcome.siblings]
        error = next((e for e in map(committer.conflict, parts) if e is not None), None)
        if error is not None:
            for part in parts:
                lake.discard(part.pending)
    if error is not None:
        failed = committer.reject(source, error)
        result.failed.append(failed)
        bar.advance(source.size_bytes, error=failed.line(), count=count)
        return False
    together = frozenset(part.trace_id for part in parts)
    for part in parts:
        committer.land(part, keep=together)
        result.loaded.append(Loaded(path, source.run_id, part.trace_id, part.rank,
                                    part.slices, part.flows, part.seconds))
    result.bytes_read += source.size_bytes
    result.uncompressed_bytes += outcome.uncompressed_bytes
    kind = _input_kind(source)
    result.bytes_by_input[kind] = result.bytes_by_input.get(kind, 0) + outcome.uncompressed_bytes
    ranks = ", ".join(str(part.rank) for part in parts)
    rank = (f"rank {ranks} (single-process trace: no distributed rank)"
            if outcome.rank_source == "single_process" else f"rank {ranks}")
    bar.advance(source.size_bytes, f"loaded {path} (run {source.run_id}, {rank}, "
                f"{sum(p.slices for p in parts)} slices, {sum(p.flows for p in parts)} flows, "
                f"{outcome.seconds:.2f} s)", count=count)
    return True


def _input_kind(source: TraceFile) -> str:
    """What a trace file was, for the summary's bytes (``x MB of Kineto JSON``)."""
    return "Nsight SQLite" if source.layout == "nsys" else "Kineto JSON"


def _load_topologies(files: list[tuple[Path, str]], committer: _Committer,
                     result: IngestResult, stream: TextIO, force: bool) -> None:
    """Load every topology file into ``topology_groups``, incrementally (see
    _load_side_files): an unchanged one is skipped like a trace, so the next
    build has nothing to redo."""
    _load_side_files(files, committer, result, stream, force, layout="topology",
                     read_manifest=read_topology_manifest, load=load_topology_file,
                     loaded=result.topologies)


def _reject_side_file(path: Path, run_id: str, layout: str, exc: TraceError,
                      committer: _Committer, result: IngestResult, stream: TextIO) -> None:
    """Record a bad topology or PP-timer file like a bad trace: error line and row."""
    stat = path.stat() if path.exists() else None
    source = TraceFile(path=path, run_id=run_id, layout=layout, rank_hint=None,
                       iteration_hint=None, size_bytes=stat.st_size if stat else 0,
                       mtime_ns=stat.st_mtime_ns if stat else 0)
    failed = committer.reject(source, exc)
    result.failed.append(failed)
    print(failed.line(), file=stream, flush=True)


def _load_pp_timers(files: list[tuple[Path, str]], committer: _Committer,
                    result: IngestResult, stream: TextIO, force: bool) -> None:
    """Load every PP-timer log into ``pp_timer_events``, incrementally (see _load_side_files)."""
    _load_side_files(files, committer, result, stream, force, layout="pp_timer",
                     read_manifest=read_pp_timer_manifest, load=load_pp_timer_file,
                     loaded=result.pp_timers)


def _load_comm_logs(files: list[tuple[Path, str]], committer: _Committer,
                    result: IngestResult, stream: TextIO, force: bool) -> None:
    """Load every comm log into ``comm_log_events``, incrementally (see _load_side_files)."""
    _load_side_files(files, committer, result, stream, force, layout="comm_log",
                     read_manifest=read_comm_log_manifest, load=load_comm_log_file,
                     loaded=result.comm_logs)


def _load_model_configs(files: list[tuple[Path, str]], committer: _Committer,
                        result: IngestResult, stream: TextIO, force: bool) -> None:
    """Load every model config into ``model_configs``, incrementally (see _load_side_files)."""
    _load_side_files(files, committer, result, stream, force, layout="model_config",
                     read_manifest=read_model_config_manifest, load=load_model_config_file,
                     loaded=result.model_configs)


def _load_side_files(files: list[tuple[Path, str]], committer: _Committer,
                     result: IngestResult, stream: TextIO, force: bool, *, layout: str,
                     read_manifest: Any, load: Any, loaded: list[tuple[str, str, int]]) -> None:
    """Load small per-file tables (PP-timer logs, comm logs) incrementally.

    Like traces: a file whose path, size and mtime match what is loaded is
    skipped unread, one whose content hash matches is skipped after
    reading; a bad file gets an error line and an ``ingest_errors`` row and
    leaves any earlier version of it loaded.
    """
    if not files:
        return
    manifest = read_manifest(committer.warehouse)
    for path, run_id in files:
        shown = display_path(path)
        known = None if force else manifest.get((run_id, shown))
        if known is not None:
            try:
                stat = path.stat()
            except OSError:
                stat = None
            if stat is not None and (stat.st_size, stat.st_mtime_ns) == (known.size_bytes,
                                                                         known.mtime_ns):
                result.skipped.append((shown, "already loaded, unchanged"))
                continue
        committer.start_writing()
        try:
            rows = load(committer.warehouse, run_id, path, committer.token, known,
                        before_commit=lambda shown=shown: committer.clear_errors(shown))
        except TraceError as exc:
            _reject_side_file(path, run_id, layout, exc, committer, result, stream)
            continue
        committer.clear_errors(shown)  # loaded already (the same content): no commit
        if rows is None:
            result.skipped.append((shown, "already loaded, same content"))
        else:
            loaded.append((shown, run_id, rows))


def _remove_temporaries(wh: Warehouse, token: str) -> None:
    for tmp in wh.lake.rglob(f".*.{token}{lake.TMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
