#!/usr/bin/env python3
"""Ingest benchmark: tracehouse vs Holistic Trace Analysis (HTA, PyPI ``traceinsight``).

For every trace set, in the same run and on the same files, this measures

* tracehouse: ``tracehouse.ingest.runner.ingest_paths`` into a fresh temporary
  warehouse (parse + write the Parquet lake);
* HTA: ``hta.trace_analysis.TraceAnalysis(..., include_last_profiler_step=True)``
  (parse every trace into in-memory pandas DataFrames, align ranks, filter).

Each measurement runs in its own fresh child process (``python ingest.py _child
SPEC``) so that interpreter state, caches and ``getrusage(RUSAGE_CHILDREN)`` never
leak from one measurement into the next. See benchmarks/README.md for what every
column means.

    python benchmarks/ingest.py [PATH ...] [--jobs N] [--repeat R] [--json OUT]
                                [--scale K [--scale-trace FILE]]
                                [--skip-peer | --skip-tracehouse]
                                [--tree NAME=REV ...]

Only the standard library is imported here; the tools are imported in the
children.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import flowgen  # noqa: E402 (benchmarks/flowgen.py, beside this file)

KINETO = REPO.parent / "shared" / "data" / "kineto"
#: Sets measured with --small-sets (the defaults before issue 14).
SMALL_PATHS = [
    KINETO / "dlrm_8rank",
    KINETO / "single_rank" / "a100_nccl_pg_args.json.gz",
    KINETO / "megatron_cpu" / "tp2_pp2_dp2" / "iteration_3",
]
#: The 16-file Megatron set of the default sets.
MEGATRON_SET = KINETO / "megatron_cpu" / "tp2_pp2_dp2"
#: How many of its files (in path order: the 8 ranks of iteration 3, then iteration 5)
#: are merged into the ~53 MB file of the large sets (see make_merged_trace).
MERGE_COUNT = 10
MERGED_RANKS = 4  # the "4 ranks x 50 MB" set
MB = 1e6  # throughput unit: 10^6 bytes of uncompressed trace JSON
MIB = 1024 * 1024  # memory unit
RESULT_MARK = "@@BENCH-RESULT@@ "
# Harness-testing hook only: "module:function" with ingest_paths' signature
# replaces the real tracehouse API in the child. Unset in real benchmark runs.
IMPL_ENV = "TRACEHOUSE_BENCH_INGEST"
# Same pattern HTA uses to map a file to its rank (hta/common/trace_file.py).
RANK_RE = re.compile(rb'"rank":\s+(\d+)')
REPEAT_AUTO_LIMIT = 500 * MB  # sets above this many uncompressed bytes run once by default
TOOLS = ("tracehouse", "hta")


# --------------------------------------------------------------------------- child side


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _own_peak_rss_kib() -> int:
    """This process's peak RSS since it started its program (``VmHWM``), in KiB.

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries the peak of the
    image an ``exec`` replaced into it, so every child reported at least the
    harness's own RSS when it forked (194 MiB once the merged sets were built,
    whichever tool ran), and on small sets both tools showed that same floor.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _count_process_starts() -> list[int]:
    """Count multiprocessing processes started from now on (pool workers included)."""
    import multiprocessing.process as mpp

    started = [0]
    original = mpp.BaseProcess.start

    def start(self):  # noqa: ANN001
        started[0] += 1
        return original(self)

    mpp.BaseProcess.start = start
    return started


def _resolve_jobs(jobs: int | str) -> int:
    return (os.cpu_count() or 1) if jobs == "auto" else int(jobs)


def _tracehouse_prepare(spec: dict):
    impl = os.environ.get(IMPL_ENV)
    if impl:
        import importlib

        mod, _, fn = impl.partition(":")
        ingest_paths = getattr(importlib.import_module(mod), fn)
    else:
        # As `tracehouse ingest` does: keep pandas out of an ingest-only process.
        from tracehouse.ingest.no_pandas import keep_pandas_out

        keep_pandas_out()
        from tracehouse.ingest.runner import ingest_paths

    def load() -> dict:
        jobs = _resolve_jobs(spec["jobs"])
        res = ingest_paths(
            [Path(p) for p in spec["files"]],
            Path(spec["warehouse"]),
            run=None,  # tracehouse's default: one run per job folder
            jobs=jobs,
            force=True,
            progress=False,
        )
        info = {
            "loaded": len(res.loaded),
            "skipped": len(res.skipped),
            "failed": len(res.failed),
            "jobs": jobs,
        }
        if res.failed or len(res.loaded) != len(spec["files"]):
            info["error"] = (
                f"ingest_paths loaded {len(res.loaded)}/{len(spec['files'])} files "
                f"(skipped {len(res.skipped)}, failed {len(res.failed)}): "
                + "; ".join(
                    f"{getattr(f, 'kind', '')}: {getattr(f, 'message', f)}"
                    for f in list(res.failed)[:3]
                )
            )
        return info

    return load


def _hta_prepare(spec: dict):
    import multiprocessing

    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    jobs = spec["jobs"]
    if jobs != "auto" and int(jobs) == 1:
        # One process: HTA's own switch, Trace.load_traces(use_multiprocessing=False).
        # TraceAnalysis.__init__ does not expose it, so pin it on the method.
        original = Trace.load_traces

        def load_traces(self, include_last_profiler_step=False, **kw):  # noqa: ANN001
            kw["use_multiprocessing"] = False
            return original(self, include_last_profiler_step, **kw)

        Trace.load_traces = load_traces
    elif jobs != "auto":
        # N processes: HTA sizes its fork Pool with multiprocessing.cpu_count()
        # (min(cpu_count, ranks); above 8 ranks also bounded by free memory).
        n = int(jobs)
        multiprocessing.cpu_count = lambda: n

    def load() -> dict:
        kwargs = {"include_last_profiler_step": True, "trace_dir": spec["hta_dir"]}
        if spec.get("hta_trace_files"):
            kwargs["trace_files"] = {int(k): v for k, v in spec["hta_trace_files"].items()}
        ta = TraceAnalysis(**kwargs)
        traces = ta.t.traces
        info = {"ranks": len(traces), "rows": int(sum(len(df) for df in traces.values()))}
        if len(traces) != len(spec["files"]):
            info["error"] = f"HTA loaded {len(traces)} ranks from {len(spec['files'])} files"
        return info

    return load


def child_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    t_import = time.perf_counter()
    try:
        prepare = _hta_prepare if spec["tool"] == "hta" else _tracehouse_prepare
        load = prepare(spec)
    except Exception as exc:  # noqa: BLE001
        print(RESULT_MARK + json.dumps({"error": f"import failed: {type(exc).__name__}: {exc}"}))
        return 1
    import_s = time.perf_counter() - t_import
    started = _count_process_starts()
    base_kib = _current_rss_kib()
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    try:
        info = load()
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        info = {"error": f"{type(exc).__name__}: {exc}"}
    load_s = time.perf_counter() - t0
    cpu_s = _cpu_seconds() - cpu0
    out = {
        "import_s": import_s,
        "load_s": load_s,
        "cpu_s": cpu_s,
        "processes_started": started[0],
        "base_rss_kib": base_kib,
        # KiB. parent: this process (HTA's main process / tracehouse's
        # coordinator), its own peak (_own_peak_rss_kib). CHILDREN: ru_maxrss of
        # the largest single waited-for descendant (a worker), not a sum.
        "parent_maxrss_kib": _own_peak_rss_kib(),
        "worker_maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        **info,
    }
    print(RESULT_MARK + json.dumps(out), flush=True)
    return 1 if "error" in out else 0


# --------------------------------------------------------------------------- harness side


@dataclass
class TraceSet:
    name: str
    files: list[Path]
    gz_bytes: int = 0
    raw_bytes: int = 0
    hta_dir: Path | None = None
    hta_trace_files: dict[int, str] | None = None  # None: HTA discovers ranks in hta_dir
    results: dict[str, dict] = field(default_factory=dict)


def _open(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def is_kineto(path: Path) -> bool:
    if not (path.name.endswith(".json") or path.name.endswith(".json.gz")):
        return False
    try:
        with _open(path) as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


def discover(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and is_kineto(p))
    raise FileNotFoundError(path)


def raw_size(path: Path) -> int:
    """Uncompressed size in bytes (streams the .gz once; also warms the page cache)."""
    if not path.name.endswith(".gz"):
        with open(path, "rb") as fh:  # read it anyway so both tools start warm
            while fh.read(1 << 22):
                pass
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            n += len(chunk)
    return n


def content_rank(path: Path) -> int | None:
    with _open(path) as fh:
        m = RANK_RE.search(fh.read(1 << 20))
    return int(m.group(1)) if m else None


def set_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    if path.is_dir() and KINETO in path.parents:
        return str(path.relative_to(KINETO))
    return name


def prepare_hta_view(ts: TraceSet, folder: Path) -> None:
    """HTA wants one folder per job with one file per rank: build it from symlinks.

    If the ranks written in the files are not unique (K copies of one trace, or
    unrelated single-rank traces), HTA's folder discovery would keep one file per
    rank, so it is given an explicit {rank: file} map instead (same parse work).
    """
    folder.mkdir(parents=True)
    links, seen = [], set()
    for i, f in enumerate(ts.files):
        name = f.name if f.name not in seen else f"{i}-{f.name}"
        seen.add(name)
        link = folder / name
        link.symlink_to(f.resolve())
        links.append(link)
    ranks = [content_rank(f) for f in ts.files]
    ts.hta_dir = folder
    if None in ranks or len(set(ranks)) != len(ranks):
        ts.hta_trace_files = {k: str(link) for k, link in enumerate(links)}


def make_merged_trace(sources: list[Path], dst: Path, rank: int, world: int) -> Path:
    """One large real trace: every event of ``sources`` (10 real Megatron rank traces,
    ~53 MB of compact JSON) in one file, each source's pids offset by 10^6 x its
    index so that their threads stay apart, claiming ``rank`` of ``world``.

    Why: the largest shared trace is 9.8 MB, and a 50 MB-class file is what a real
    GPU rank writes per profiled step; merging real files keeps real event mixes.
    The sources share ``baseTimeNanoseconds``; a source that does not is refused.
    """
    head: dict | None = None
    parts: list[str] = []
    for index, src in enumerate(sources):
        with _open(src) as handle:
            doc = json.load(handle)
        if head is None:
            head = {k: v for k, v in doc.items() if k != "traceEvents"}
        elif doc.get("baseTimeNanoseconds") != head.get("baseTimeNanoseconds"):
            raise SystemExit(f"error: {src}: another baseTimeNanoseconds than {sources[0]}")
        for event in doc["traceEvents"]:
            if isinstance(event.get("pid"), int):
                event["pid"] += 1_000_000 * index
        parts.append(json.dumps(doc["traceEvents"])[1:-1])
        del doc
    assert head is not None
    dist = head.setdefault("distributedInfo", {})
    dist["rank"], dist["world_size"] = rank, world
    dist.pop("pg_config", None)  # the sources' groups do not describe the merged "world"
    text = json.dumps({**head, "traceEvents": []})
    marker = '"traceEvents": []'
    text = text.replace(marker, '"traceEvents": [' + ", ".join(parts) + "]", 1)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt", compresslevel=6) as out:
        out.write(text)
    return dst


def default_sets(scratch: Path) -> list[TraceSet]:
    """The three sets of issue 14 (one 50 MB-class file, the 16-file Megatron set,
    and 4 ranks x 50 MB: the merged file claiming ranks 0-3 of a 4-rank job), then,
    as issue 30 asks, each real trace set of ../shared/data as a row of its own and
    the flow/instant-heavy synthetic set of benchmarks/flowgen.py."""
    sources = discover(MEGATRON_SET)[:MERGE_COUNT]
    one = make_merged_trace(sources, scratch / "merged" / "rank-0.json.gz", 0, 1)
    four = [make_merged_trace(sources, scratch / "merged4" / f"rank-{r}.json.gz", r,
                              MERGED_RANKS) for r in range(MERGED_RANKS)]
    sets = [
        TraceSet(name=f"merged {MERGE_COUNT} ranks (1 file)", files=[one]),
        TraceSet(name=set_name(MEGATRON_SET), files=discover(MEGATRON_SET)),
        TraceSet(name=f"merged x {MERGED_RANKS} ranks", files=four),
    ]
    sets += [TraceSet(name=set_name(p), files=discover(p)) for p in shared_sets()]
    sets.append(TraceSet(name="flowgen (synthetic, flow/instant-heavy)",
                         files=flowgen.write_set(scratch / "flowgen")))
    return sets


def shared_sets() -> list[Path]:
    """Each real Kineto set of ../shared/data: a job folder, or a single-rank file."""
    folders = {f.parent for f in discover(KINETO)} if KINETO.is_dir() else set()
    out: list[Path] = []
    for folder in sorted(folders):
        files = discover(folder)
        out += files if folder.name == "single_rank" else [folder]
    return [p for p in out if p != MEGATRON_SET and MEGATRON_SET not in p.parents]


def make_scaled_set(src: Path, k: int, folder: Path) -> TraceSet:
    folder.mkdir(parents=True)
    suffix = ".json.gz" if src.name.endswith(".gz") else ".json"
    files = []
    for i in range(k):
        # Byte-identical copies; only the name differs. Each sits in its own folder,
        # so tracehouse (run=None: one run per folder) sees K jobs instead of
        # rejecting K-1 of them as duplicate content within one run.
        (folder / f"copy-{i}").mkdir()
        dst = folder / f"copy-{i}" / f"rank-{i}{suffix}"
        shutil.copyfile(src, dst)
        files.append(dst)
    return TraceSet(name=f"{set_name(src)} x{k}", files=files)


def parse_tree(arg: str) -> tuple[str, str]:
    """``NAME=REV`` of --tree."""
    name, sep, rev = arg.partition("=")
    if not sep or not name or not rev:
        raise SystemExit(f"error: --tree takes NAME=REV, not {arg!r}")
    return name, rev


def make_tree(rev: str, dest: Path) -> Path:
    """tracehouse as of git revision ``rev`` of this repository, importable from the
    returned folder (put first on PYTHONPATH); its C extensions built in place.

    Why a tree and not another virtualenv: one run then measures two revisions
    with the same interpreter and libraries, alternating, under the same load,
    and neither changes when someone edits or merges while it runs. The packages
    are laid out by pyproject.toml's ``package-dir`` (``tracehouse.ingest`` is
    ``ingest/``), as the editable install maps them.
    """
    import tomllib

    src = dest / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src,
                   check=True, capture_output=True)
    config = tomllib.loads((src / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    root = dest / "py"
    for package, folder in sorted(package_dir.items()):  # parents before children
        (root / package.replace(".", "/")).parent.mkdir(parents=True, exist_ok=True)
        (root / package.replace(".", "/")).symlink_to(src / folder)
    return root


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
    except OSError:
        pass
    return out


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:  # fallback: RSS
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0


def run_child(spec: dict, workdir: Path, timeout: float, sample_ms: int) -> dict:
    """Run one measurement in a fresh interpreter, sampling its process tree's PSS."""
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    out_path, err_path = workdir / "stdout", workdir / "stderr"
    peak_tree_kib, max_procs = 0, 0
    t0 = time.perf_counter()
    env = None
    if spec.get("pythonpath"):  # a --tree: its packages first, before the installed ones
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (spec["pythonpath"], os.environ.get("PYTHONPATH")) if p)}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_child", str(spec_path)],
            stdout=out,
            stderr=err,
            cwd=workdir,
            env=env,
        )
        deadline = t0 + timeout
        while proc.poll() is None:
            if time.perf_counter() > deadline:
                proc.kill()
                proc.wait()
                return {"error": f"timed out after {timeout:.0f}s"}
            if sample_ms > 0:
                tree, todo = [], [proc.pid]
                while todo:
                    p = todo.pop()
                    tree.append(p)
                    todo.extend(_children(p))
                peak_tree_kib = max(peak_tree_kib, sum(_pss_kib(p) for p in tree))
                max_procs = max(max_procs, len(tree))
                time.sleep(sample_ms / 1000)
            else:
                time.sleep(0.01)
    proc_s = time.perf_counter() - t0
    stdout = out_path.read_text(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if not lines:
        tail = err_path.read_text(errors="replace")[-1500:]
        return {"error": f"child exited {proc.returncode} without a result:\n{tail}"}
    res = json.loads(lines[-1][len(RESULT_MARK) :])
    res.update(proc_s=proc_s, tree_peak_pss_kib=peak_tree_kib or None, max_tree_procs=max_procs)
    if "error" in res:
        res["stderr_tail"] = err_path.read_text(errors="replace")[-1500:]
    return res


def summarize(runs: list[dict], ts: TraceSet, tool: str) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1].get("error", "failed"), "runs": runs}
    best = min(ok, key=lambda r: r["load_s"])
    # processes started through multiprocessing (Pool, concurrent.futures); none
    # means the load ran in the child's own process
    workers = max(1, best["processes_started"])
    mb = ts.raw_bytes / MB
    tree = [r["tree_peak_pss_kib"] for r in ok if r.get("tree_peak_pss_kib")]
    return {
        "load_s": best["load_s"],
        # The acceptance figure of issue 30: the median over the alternating runs.
        "load_s_median": statistics.median(r["load_s"] for r in ok),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in ok),
        "proc_s": best["proc_s"],
        "import_s": best["import_s"],
        "cpu_s": best["cpu_s"],
        "workers": workers,
        "mb_per_s": mb / best["load_s"],
        "mb_per_s_per_proc": mb / best["load_s"] / workers,
        "mb_per_cpu_s": mb / best["cpu_s"] if best["cpu_s"] > 0 else None,
        "parent_peak_mib": max(r["parent_maxrss_kib"] for r in ok) / 1024,
        "worker_peak_mib": max(r["worker_maxrss_kib"] for r in ok) / 1024,
        "base_rss_mib": best["base_rss_kib"] / 1024,
        "tree_peak_pss_mib": (max(tree) / 1024) if tree else None,
        "repeats_ok": len(ok),
        "runs": runs,
        **{k: best[k] for k in ("rows", "ranks", "loaded", "skipped", "jobs") if k in best},
    }


def _fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_table(sets: list[TraceSet], tools: list[str]) -> None:
    nw = max([4] + [len(ts.name) for ts in sets])
    hdr = (
        f"{'set':<{nw}} {'tool':<10} {'files':>5} {'MB':>7} {'proc':>4} {'load s':>7} "
        f"{'proc s':>7} {'MB/s':>7} {'MB/s/pr':>8} {'MB/cpu-s':>8} {'parent':>7} "
        f"{'worker':>7} {'tree':>7}"
    )
    print()
    print(
        "MB = 10^6 bytes of uncompressed trace JSON; memory columns in MiB "
        "(parent: VmHWM; worker: ru_maxrss; tree: sampled PSS sum)"
    )
    print(hdr)
    print("-" * len(hdr))
    for ts in sets:
        for tool in tools:
            r = ts.results.get(tool, {})
            head = f"{ts.name:<{nw}} {tool:<10} {len(ts.files):>5} {ts.raw_bytes / MB:>7.1f}"
            if "error" in r:
                msg = r["error"].splitlines()[0][:90]
                print(f"{head} FAILED: {msg}")
                continue
            w = r["worker_peak_mib"]
            print(
                f"{head} {r['workers']:>4} {r['load_s']:>7.3f} {r['proc_s']:>7.2f} "
                f"{r['mb_per_s']:>7.1f} {r['mb_per_s_per_proc']:>8.1f} "
                f"{_fmt(r['mb_per_cpu_s'], '.1f'):>8} {r['parent_peak_mib']:>7.0f} "
                f"{(format(w, '.0f') if w else '-'):>7} {_fmt(r['tree_peak_pss_mib'], '.0f'):>7}"
            )
    ours = [t for t in tools if t != "hta"]
    if "hta" in tools and ours:
        print()
        hdr2 = (
            f"{'set':<{nw}} {'tool':<10} {'MB/s th/hta':>11} {'MB/s/pr th/hta':>14} "
            f"{'MB/cpu-s th/hta':>15} "
            f"{'peak hta/th':>11} {'tree hta/th':>11} {'median load hta/th':>18} "
            f"{'peak th/hta':>11} {'median cpu hta/th':>17}"
        )
        print(hdr2)
        print("-" * len(hdr2))
        for ts, tool in ((ts, tool) for ts in sets for tool in ours):
            rt = ts.results.get(ratios_key(tool))
            if not rt:
                print(f"{ts.name:<{nw}} {tool:<10} n/a (a side failed)")
                continue
            print(
                f"{ts.name:<{nw}} {tool:<10} {_fmt(rt['throughput_th_over_hta']):>11} "
                f"{_fmt(rt['throughput_per_proc_th_over_hta']):>14} "
                f"{_fmt(rt['throughput_per_cpu_th_over_hta']):>15} "
                f"{_fmt(rt['peak_rss_hta_over_th']):>11} {_fmt(rt['tree_pss_hta_over_th']):>11} "
                f"{_fmt(rt['load_median_hta_over_th']):>18} {_fmt(rt['peak_rss_th_over_hta']):>11} "
                f"{_fmt(rt['cpu_median_hta_over_th']):>17}"
            )
        print(
            "(>1 is better for tracehouse in every ratio column but peak th/hta, where <1 is; "
            "peak = max(parent, worker) peak RSS; medians: over the alternating runs)"
        )


def ratios_key(tool: str) -> str:
    """Where a tracehouse tool's ratios to HTA sit in a set's results: ``ratios`` for
    the installed tracehouse (as before --tree existed), ``ratios th@NAME`` for a tree."""
    return "ratios" if tool == "tracehouse" else f"ratios {tool}"


def ratios(th: dict, hta: dict) -> dict | None:
    if "error" in th or "error" in hta:
        return None

    def div(a, b):
        return a / b if a and b else None

    th_peak = max(th["parent_peak_mib"], th["worker_peak_mib"])
    hta_peak = max(hta["parent_peak_mib"], hta["worker_peak_mib"])
    return {
        "throughput_th_over_hta": div(th["mb_per_s"], hta["mb_per_s"]),
        "throughput_per_proc_th_over_hta": div(th["mb_per_s_per_proc"], hta["mb_per_s_per_proc"]),
        "throughput_per_cpu_th_over_hta": div(th["mb_per_cpu_s"], hta["mb_per_cpu_s"]),
        "load_median_hta_over_th": div(hta["load_s_median"], th["load_s_median"]),
        "cpu_median_hta_over_th": div(hta["cpu_s_median"], th["cpu_s_median"]),
        "peak_rss_th_over_hta": div(th_peak, hta_peak),
        "peak_rss_hta_over_th": div(hta_peak, th_peak),
        "tree_pss_hta_over_th": div(hta["tree_peak_pss_mib"], th["tree_peak_pss_mib"]),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="benchmarks/ingest.py",
        description="Ingest throughput and memory: tracehouse vs Holistic Trace Analysis.",
    )
    ap.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="trace sets: a folder (its Kineto .json/.json.gz files, recursively) or one "
        f"file; default: one ~53 MB file merged from {MERGE_COUNT} files of "
        f"{MEGATRON_SET.relative_to(KINETO)}, that set itself (16 files) "
        f"and {MERGED_RANKS} ranks of the merged file, under {KINETO}",
    )
    ap.add_argument(
        "--small-sets",
        action="store_true",
        help="measure the shared files as they are instead: "
        f"{', '.join(str(p.relative_to(KINETO)) for p in SMALL_PATHS)}",
    )
    ap.add_argument(
        "--jobs",
        "-j",
        metavar="N",
        default="1",
        help="worker processes for both tools (default 1); 'auto' = each tool's own default "
        "(HTA: min(cpu_count, ranks); tracehouse: os.cpu_count())",
    )
    ap.add_argument(
        "--repeat",
        "-r",
        metavar="R",
        type=int,
        default=None,
        help="best-of-R timing (default 3, or 1 for sets above "
        f"{REPEAT_AUTO_LIMIT / MB:.0f} MB uncompressed)",
    )
    ap.add_argument("--json", type=Path, metavar="OUT", help="write all figures to OUT")
    ap.add_argument(
        "--scale",
        type=int,
        metavar="K",
        help="also measure K byte-identical copies of --scale-trace, as "
        "copy-<k>/rank-<k>.json[.gz]",
    )
    ap.add_argument(
        "--scale-trace",
        type=Path,
        metavar="FILE",
        help="trace copied by --scale (default: the largest file among the sets)",
    )
    side = ap.add_mutually_exclusive_group()
    side.add_argument("--skip-peer", action="store_true", help="measure tracehouse only")
    side.add_argument("--skip-tracehouse", action="store_true", help="measure HTA only")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=REV",
        help="measure tracehouse as of git revision REV of this repository (built in the "
        "scratch folder, first on PYTHONPATH) as tool th@NAME, instead of the installed "
        "one; repeat to compare revisions in one run (e.g. --tree main=main --tree new=HEAD)",
    )
    ap.add_argument(
        "--timeout", metavar="S", type=float, default=1800, help="per child run, seconds"
    )
    ap.add_argument(
        "--sample-ms",
        metavar="MS",
        type=int,
        default=50,
        help="interval of the /proc PSS sampling of the child's process tree (0: off)",
    )
    ap.add_argument(
        "--tmp",
        metavar="DIR",
        type=Path,
        default=None,
        help="scratch folder (default: system temp)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    if args.jobs != "auto":
        try:
            if int(args.jobs) < 1:
                raise ValueError
        except ValueError:
            ap.error("--jobs takes a positive integer or 'auto'")
    if args.scale is not None and args.scale < 1:
        ap.error("--scale takes a positive integer")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    tools = [t for t in TOOLS if not (t == "hta" and args.skip_peer)]
    tools = [t for t in tools if not (t == "tracehouse" and args.skip_tracehouse)]
    trees = dict(parse_tree(arg) for arg in args.tree)
    if trees and "tracehouse" in tools:  # the trees replace the installed tracehouse
        tools = [f"th@{name}" for name in trees] + [t for t in tools if t != "tracehouse"]

    if "hta" in tools and importlib.util.find_spec("hta") is None:
        print(
            "error: Holistic Trace Analysis (PyPI 'traceinsight') is not installed in this "
            f"interpreter ({sys.executable}).\n"
            "       install the extra:  pip install -e '.[traceinsight]'\n"
            "       or measure tracehouse alone with --skip-peer",
            file=sys.stderr,
        )
        return 2
    if "tracehouse" in tools and not os.environ.get(IMPL_ENV):
        try:
            found = importlib.util.find_spec("tracehouse.ingest.runner") is not None
        except ImportError:
            found = False
        if not found:
            print(
                "error: tracehouse.ingest.runner (ingest_paths) is not importable from "
                f"{sys.executable}; install the project (pip install -e .) "
                "or measure HTA alone with --skip-tracehouse",
                file=sys.stderr,
            )
            return 2

    paths = args.paths or (SMALL_PATHS if args.small_sets else [])
    sets: list[TraceSet] = []
    for p in paths:
        p = p.resolve()
        try:
            files = discover(p)
        except FileNotFoundError:
            print(f"error: no such file or folder: {p}", file=sys.stderr)
            return 2
        if not files:
            print(f"error: no Kineto trace (.json/.json.gz) under {p}", file=sys.stderr)
            return 2
        sets.append(TraceSet(name=set_name(p), files=files))

    scratch = Path(tempfile.mkdtemp(prefix="tracehouse-bench-", dir=args.tmp))
    try:
        tree_paths = {}
        for name, rev in trees.items():
            print(f"building tree th@{name} from {rev}…", flush=True)
            tree_paths[f"th@{name}"] = str(make_tree(rev, scratch / "trees" / name))
        if not sets:
            print("building the large sets from the shared traces…", flush=True)
            sets = default_sets(scratch)
        sizes: dict[Path, int] = {}
        for ts in sets:
            for f in ts.files:
                if f not in sizes:
                    sizes[f] = raw_size(f)
        if args.scale:
            src = (args.scale_trace or max(sizes, key=sizes.get)).resolve()
            if src not in sizes:
                sizes[src] = raw_size(src)
            scaled = make_scaled_set(src, args.scale, scratch / "scaled")
            for f in scaled.files:
                sizes[f] = sizes[src]
            sets.append(scaled)
        for i, ts in enumerate(sets):
            ts.gz_bytes = sum(f.stat().st_size for f in ts.files)
            ts.raw_bytes = sum(sizes[f] for f in ts.files)
            prepare_hta_view(ts, scratch / f"set{i}" / "hta")

        print(
            f"python {platform.python_version()} on {platform.machine()}, "
            f"{os.cpu_count()} CPUs; jobs={args.jobs}; scratch {scratch}",
            flush=True,
        )
        for i, ts in enumerate(sets):
            repeat = args.repeat or (3 if ts.raw_bytes <= REPEAT_AUTO_LIMIT else 1)
            mode = "trace_files map" if ts.hta_trace_files else "trace_dir"
            print(
                f"[{ts.name}] {len(ts.files)} files, {ts.gz_bytes / MB:.1f} MB on disk, "
                f"{ts.raw_bytes / MB:.1f} MB uncompressed; best of {repeat}; HTA via {mode}",
                flush=True,
            )
            runs: dict[str, list[dict]] = {t: [] for t in tools}
            for rep in range(repeat):
                order = tools if rep % 2 == 0 else tools[::-1]  # alternate to spread drift
                for tool in order:
                    work = scratch / f"set{i}" / f"{tool}-{rep}"
                    work.mkdir(parents=True)
                    spec = {
                        "tool": tool,
                        "files": [str(f) for f in ts.files],
                        "jobs": args.jobs,
                        "warehouse": str(work / "warehouse"),
                        "hta_dir": str(ts.hta_dir),
                        "hta_trace_files": ts.hta_trace_files,
                        "pythonpath": tree_paths.get(tool),
                    }
                    r = run_child(spec, work, args.timeout, args.sample_ms)
                    runs[tool].append(r)
                    status = (
                        f"load {r['load_s']:.3f}s"
                        if "error" not in r
                        else "FAILED: " + r["error"].splitlines()[0][:120]
                    )
                    print(f"  {tool:<10} run {rep + 1}/{repeat}: {status}", flush=True)
                    if not args.keep:
                        shutil.rmtree(work, ignore_errors=True)
            for tool in tools:
                ts.results[tool] = summarize(runs[tool], ts, tool)
            if "hta" in tools:
                for tool in tools:
                    if tool != "hta":
                        ts.results[ratios_key(tool)] = ratios(ts.results[tool], ts.results["hta"])

        print_table(sets, tools)
        if args.json:
            doc = {
                "machine": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpu_count": os.cpu_count(),
                },
                "traceinsight": _version("traceinsight"),
                "tracehouse": _version("tracehouse"),
                "jobs": args.jobs,
                "units": {"MB": "1e6 bytes of uncompressed trace JSON", "mib": "2^20 bytes"},
                "sets": [
                    {
                        "name": ts.name,
                        "files": [str(f) for f in ts.files],
                        "gz_bytes": ts.gz_bytes,
                        "raw_bytes": ts.raw_bytes,
                        "hta_mode": "trace_files" if ts.hta_trace_files else "trace_dir",
                        "results": ts.results,
                    }
                    for ts in sets
                ],
            }
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, indent=1))
            print(f"\nwrote {args.json}")
    finally:
        if args.keep:
            print(f"kept scratch folder {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    failed = any("error" in ts.results.get(t, {}) for ts in sets for t in tools)
    return 1 if failed else 0


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
