"""Find trace files under the paths a user gives, and read what their names say.

Layouts recognised (first match wins):

* Megatron-TraceViz: ``iteration_N/rank_XXXX_iter_N.pt.trace.json[.gz]``
* PyTorch ``tensorboard_trace_handler``: ``<worker>[.<pid>].<ms>.pt.trace.json[.gz]``
  (the rank is read from a worker name such as ``rank3`` or ``worker3_step_12``)
* HTA-style: ``rank-N.json[.gz]`` (also ``<prefix>_rank-N.json[.gz]``)
* anything else ending in ``.json`` or ``.json.gz``: a generic Kineto file
* Nsight Systems: ``*.sqlite`` exports and ``*.nsys-rep`` reports, and any
  other file that starts with SQLite's magic bytes (layout ``nsys``; the
  rank hint is the first rank of the file, one rank per GPU)

Sidecars that sit beside traces (topology dumps, PP-timer logs, Genstack
comm logs) are not traces; discovery reports them as skipped instead of
failing on them. Topology files (``topology*.json``, Megatron-TraceViz's
``unique_parallel_groups_*.txt``) are also listed in
``Discovery.topologies`` so ingest loads them into ``topology_groups``, and
PP-timer logs (``event_times_PP*_VPP*_TPxCPxDP_rank_*_pp_rank_*_rank_*.json``)
in ``Discovery.pp_timers`` for ``pp_timer_events``, and comm logs
(``comm_log_rank_<r>.json``) in ``Discovery.comm_logs`` for
``comm_log_events`` (those are loaded, so they are not listed as skipped).

The run a file belongs to is ``--run`` when given, else the folder holding
the trace (skipping an ``iteration_N`` folder, and a ``pp_timer_logs``
folder, the patch's default for PP-timer logs), so ingesting a tree of jobs
gives one run per job folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .comm_log import is_comm_log_name
from .model_config import is_model_config_name
from .nsys.read import NSYS_SUFFIXES, has_sqlite_magic
from .pp_timer import is_pp_timer_name
from .topology import TRACEVIZ_TXT_NAME, is_topology_name
from .trace_types import TraceFile

_MEGATRON = re.compile(r"^rank_(\d+)_iter_(\d+)\.pt\.trace\.json(\.gz)?$")
# torch writes f"{worker_name}.{time_ms}.pt.trace.json"; older releases put the pid first.
_TENSORBOARD = re.compile(r"^(?P<worker>.+?)(?:\.\d+){1,2}\.pt\.trace\.json(\.gz)?$")
_HTA = re.compile(r"(?:^|[_.-])rank-(\d+)\.json(\.gz)?$")
_WORKER_RANK = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)
_GENERIC_RANK = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_ITERATION_DIR = re.compile(r"^iteration_(\d+)$")
#: Folders that never name a run: a run's per-iteration and PP-timer subfolders.
_RUN_SUBFOLDER = re.compile(r"^(?:iteration_\d+|pp_timer_logs)$")
_ITER_IN_NAME = re.compile(r"_iter_(\d+)")
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

#: Files beside traces that other parts of tracehouse read; never traces.
_SIDECARS = (
    re.compile(r"^topology.*\.json$"),
    re.compile(r"^event_times_.*\.json$"),
    re.compile(r"^comm_log_rank_\d+\.json$"),
    re.compile(r"^ground_truth\.json$"),  # written beside a run by `tracehouse simulate`
    re.compile(r"^model_config.*\.json$"),
)
_GENSTACK_SIDECARS = frozenset({"config.json", "summary.json"})


class DiscoveryError(Exception):
    """A path argument that cannot be used at all (a usage error, exit code 2)."""


@dataclass
class Discovery:
    """What discovery found: trace files to load and files it chose to skip."""

    traces: list[TraceFile] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    #: Topology files (``topology*.json``, ``unique_parallel_groups_*.txt``)
    #: found inside folders, with their run: loaded into ``topology_groups``.
    topologies: list[tuple[Path, str]] = field(default_factory=list)
    #: PP-timer logs (``event_times_PP*.json``) with their run: loaded into
    #: ``pp_timer_events``.
    pp_timers: list[tuple[Path, str]] = field(default_factory=list)
    #: Model/batch configs (``model_config*.json``) with their run: ``model_configs``.
    model_configs: list[tuple[Path, str]] = field(default_factory=list)
    #: Comm logs (``comm_log_rank_<r>.json``, Genstack's or ``tracehouse commtrace``'s)
    #: with their run: loaded into ``comm_log_events``.
    comm_logs: list[tuple[Path, str]] = field(default_factory=list)
    #: The paths given under which an input (trace, topology, PP-timer or comm-log
    #: file) was found, as given: by where a file was found, not where it resolves
    #: to, so a folder of symbolic links to traces elsewhere is not empty.
    given_with_inputs: set[Path] = field(default_factory=set)

    def paths_without_inputs(self, given: list[Path]) -> list[Path]:
        """The paths of ``given`` under which nothing to load was found (no trace,
        topology, PP-timer or comm-log file; skipped sidecars do not count)."""
        return [path for path in given if path not in self.given_with_inputs]


def is_trace_name(name: str) -> bool:
    return name.endswith(".json") or name.endswith(".json.gz")


def is_nsys_file(path: Path) -> bool:
    """An Nsight Systems export or report: by suffix, or by SQLite's magic bytes."""
    return path.name.lower().endswith(NSYS_SUFFIXES) or (
        not is_trace_name(path.name) and has_sqlite_magic(path))


def valid_run_name(name: str) -> bool:
    """Run names become folder names in the lake: letters, digits, ``.``, ``_``, ``-``."""
    return bool(_RUN_NAME.match(name))


def sanitize_run_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-") or "run"
    return cleaned[:128]


def default_run_for(path: Path) -> str:
    """The job folder of a file: its parent, or the grandparent for ``iteration_N`` and
    ``pp_timer_logs`` folders."""
    folder = path.parent
    if _RUN_SUBFOLDER.match(folder.name) and folder.parent != folder:
        folder = folder.parent
    return sanitize_run_name(folder.name or "run")


def classify(path: Path) -> tuple[str, int | None, int | None]:
    """Layout, rank hint and iteration hint from a trace's file and folder names."""
    name = path.name
    iteration = _iteration_from_folders(path)
    match = _MEGATRON.match(name)
    if match:
        return "megatron_traceviz", int(match.group(1)), int(match.group(2))
    match = _TENSORBOARD.match(name)
    if match:
        worker = _WORKER_RANK.search(match.group("worker"))
        return "tensorboard", int(worker.group(1)) if worker else None, iteration
    match = _HTA.search(name)
    if match:
        return "hta", int(match.group(1)), iteration
    generic = _GENERIC_RANK.search(name)
    if iteration is None:
        in_name = _ITER_IN_NAME.search(name)
        iteration = int(in_name.group(1)) if in_name else None
    return "generic", int(generic.group(1)) if generic else None, iteration


def _iteration_from_folders(path: Path) -> int | None:
    for folder in path.parents:
        match = _ITERATION_DIR.match(folder.name)
        if match:
            return int(match.group(1))
    return None


def _sidecar_reason(path: Path) -> str | None:
    name = path.name
    if any(pattern.match(name) for pattern in _SIDECARS):
        return "sidecar file (topology, PP timer, comm log or ground truth), not a profiler trace"
    if name in _GENSTACK_SIDECARS and any(path.parent.glob("comm_log_rank_*.json")):
        return "Genstack run description beside comm logs, not a profiler trace"
    return None


def discover(paths: list[Path], run: str | None = None) -> Discovery:
    """Every trace file under ``paths`` (files or folders, searched recursively).

    A file named explicitly is always treated as a trace; inside folders,
    sidecars are skipped. Raises :class:`DiscoveryError` for a path that
    does not exist or a run name that cannot be a folder name.
    """
    if run is not None and not valid_run_name(run):
        raise DiscoveryError(
            f"--run {run!r}: run names may hold letters, digits, '.', '_' and '-' "
            "(up to 128 characters, starting with a letter or digit)"
        )
    found = Discovery()
    seen: set[Path] = set()
    inputs: set[Path] = set()  # resolved files that are loaded (not skipped sidecars)
    for given in paths:
        if not given.exists():
            raise DiscoveryError(f"{given}: no such file or folder")
        if given.is_file():
            candidates = [(given, True)]
        else:
            candidates = [
                (p, False)
                for p in sorted(given.rglob("*"))
                if p.is_file() and (is_trace_name(p.name) or TRACEVIZ_TXT_NAME.match(p.name)
                                    or is_nsys_file(p))
            ]
        for path, explicit in candidates:
            resolved = path.resolve()
            if resolved in seen:
                if resolved in inputs:
                    found.given_with_inputs.add(given)  # the same file given twice
                continue
            seen.add(resolved)
            if _add_input(found, path, resolved, explicit, run):
                inputs.add(resolved)
                found.given_with_inputs.add(given)
    return found


def _add_input(found: Discovery, path: Path, resolved: Path, explicit: bool,
               run: str | None) -> bool:
    """File ``path`` into ``found`` as what its name says; False for a skipped sidecar."""
    if not explicit and is_topology_name(path.name):
        found.topologies.append((resolved, run or default_run_for(resolved)))
        return True
    if is_pp_timer_name(path.name):
        found.pp_timers.append((resolved, run or default_run_for(resolved)))
        return True
    if is_model_config_name(path.name):
        found.model_configs.append((resolved, run or default_run_for(resolved)))
        return True
    if is_comm_log_name(path.name):
        found.comm_logs.append((resolved, run or default_run_for(resolved)))
        return True
    if TRACEVIZ_TXT_NAME.match(path.name):  # named explicitly
        found.topologies.append((resolved, run or default_run_for(resolved)))
        return True
    if not explicit:
        reason = _sidecar_reason(path)
        if reason:
            found.skipped.append((resolved, reason))
            return False
    layout, rank_hint, iteration_hint = classify(path)
    if is_nsys_file(path):
        layout = "nsys"
    stat = resolved.stat()
    found.traces.append(
        TraceFile(
            path=resolved,
            run_id=run or default_run_for(resolved),
            layout=layout,
            rank_hint=rank_hint,
            iteration_hint=iteration_hint,
            size_bytes=stat.st_size,
            mtime_ns=stat.st_mtime_ns,
        )
    )
    return True
