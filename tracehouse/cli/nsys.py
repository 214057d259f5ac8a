"""``tracehouse nsys info|summary|overlap|nccl|iters|tree FILE``: nsys-ai's views, from marts.

The figures are not computed here: the file is ingested (into
``--warehouse``, else a temporary warehouse), the marts the views read are
built (``VIEW_MARTS``: the general ``fct_kernels``, ``fct_rank_iterations``
and ``fct_annotation_ranges`` (the NVTX tree) that answer Kineto traces too,
and ``fct_nsys_iterations`` for what only Nsight has, NVTX-marker
iterations), and each view is a query on them: counts and sums grouped,
interval figures read as the marts computed them (filtered by bind
parameters, never by SQL built from data).
``--trim S E`` selects GPU work wholly inside [S, E] seconds of the capture
clock (as nsys and nsys-ai show it) through the dbt vars
``capture_window_start_ns`` / ``capture_window_end_ns``; since that rebuilds
the marts for the window, it always works in a temporary warehouse, never in
``--warehouse``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

VIEWS = ("info", "summary", "overlap", "nccl", "iters", "tree")
#: The marts each view reads, built with everything they are built from (dbt
#: selectors): the general marts every trace has, and the Nsight marts for what no
#: general mart answers. Per view, so that ``summary`` does not wait for the NVTX
#: tree (the costliest models on a large export).
VIEW_MARTS = {
    "info": ("+fct_kernels", "+fct_annotation_ranges"),
    "summary": ("+fct_kernels", "+fct_rank_iterations"),
    "overlap": ("+fct_kernels", "+fct_rank_iterations"),
    "nccl": ("+fct_kernels",),
    "iters": ("+fct_nsys_iterations",),
    "tree": ("+fct_annotation_ranges",),
}
#: Every view's marts, once each.
ALL_VIEW_MARTS = tuple(dict.fromkeys(m for marts in VIEW_MARTS.values() for m in marts))
#: Top kernels and tree nodes shown per GPU in the table format (JSON has all).
TOP_KERNELS = 10


class NsysViewError(Exception):
    """The file could not be loaded or the marts not built; the message says why."""


class NsysUsageError(NsysViewError):
    """The arguments ask for something the file does not hold (a GPU it lacks)."""


def add_parser(sub: Any) -> None:
    """Register ``tracehouse nsys`` on the main parser's subcommands."""
    from tracehouse.cli.main import _warehouse_dir

    parser = sub.add_parser(
        "nsys",
        help="Nsight Systems views (as nsys-ai shows them), answered by the marts",
        description="Ingest an Nsight Systems export (.sqlite, or .nsys-rep with nsys on PATH) "
                    "into --warehouse (else a temporary warehouse), build the marts it needs and "
                    "print one view of them. A file the warehouse already holds (same path, "
                    "else same content) is not loaded again, and the marts are not rebuilt "
                    "when nothing changed.")
    parser.add_argument("--warehouse", type=_warehouse_dir, metavar="DIR",
                        help="warehouse to load the file into and keep (default: a temporary "
                             "warehouse, removed afterwards; $TRACEHOUSE_WAREHOUSE is not "
                             "used)")
    parser.add_argument("view", choices=VIEWS)
    parser.add_argument("file", type=Path, metavar="FILE")
    parser.add_argument("--gpu", type=int, metavar="N", help="CUDA device id (default: all)")
    parser.add_argument("--trim", type=float, nargs=2, metavar=("START", "END"),
                        help="capture-clock seconds; only kernels wholly inside count "
                             "(uses a temporary warehouse)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(handler=_cmd_nsys)


def _cmd_nsys(args: argparse.Namespace) -> int:
    if args.trim is not None and not args.trim[0] < args.trim[1]:
        print("error: --trim START END needs START < END (seconds)", file=sys.stderr)
        return 2
    if not args.file.is_file():
        print(f"error: {args.file}: no such file", file=sys.stderr)
        return 2
    try:
        result = nsys_view(args.view, args.file, warehouse=args.warehouse, gpu=args.gpu,
                           trim=tuple(args.trim) if args.trim else None)
    except NsysUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NsysViewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print(format_table(args.view, result))
    return 0


@contextlib.contextmanager
def _warehouse_for(warehouse: str | Path | None, trim: bool) -> Iterator[Path]:
    if warehouse is not None and not trim:
        yield Path(warehouse).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="tracehouse-nsys-") as tmp:
        yield Path(tmp)


def nsys_view(view: str, file: Path, *, warehouse: str | Path | None = None,
              gpu: int | None = None, trim: tuple[float, float] | None = None) -> Any:
    """Ingest ``file``, build the marts the views read and return one view as JSON-ready
    data.

    Raises :class:`NsysViewError` when the file fails to load or the build fails.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}")
    with _warehouse_for(warehouse, trim is not None) as root:
        trace_ids = ingest_file(file, root)
        devices = _devices(root, trace_ids)
        if gpu is not None and gpu not in devices:
            listed = ", ".join(str(d) for d in devices)
            raise NsysUsageError(f"{file}: no GPU {gpu} (GPUs: {listed})")
        build_marts(root, trim, VIEW_MARTS[view])
        return query_view(root, view, trace_ids, gpu)


def _devices(root: Path, trace_ids: list[str]) -> list[int]:
    """The CUDA devices of the file's traces (one trace per GPU), in order."""
    glob = str(root / "lake" / "traces" / "**" / "*.parquet")
    with duckdb.connect() as con:
        rows = con.execute(
            "select distinct (distributed_info::json ->> 'nsys_device')::bigint as device "
            "from read_parquet(?, union_by_name = true) "
            "where trace_id in (select unnest(?::varchar[])) order by 1",
            [glob, trace_ids]).fetchall()
    return [row[0] for row in rows if row[0] is not None]


def query_view(root: Path, view: str, trace_ids: list[str], gpu: int | None = None) -> Any:
    """One view of the built marts of ``root``, for the GPUs (traces) given."""
    con = duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True)
    try:
        return _QUERIES[view](con, trace_ids, gpu)
    finally:
        con.close()


def ingest_file(file: Path, root: Path) -> list[str]:
    """Load ``file`` into warehouse ``root``; its trace ids by rank.

    A file the warehouse already holds is reused, never loaded a second
    time as another run: by its path (in whichever run it was loaded, e.g.
    by ``tracehouse ingest``; reloaded there if it changed since), else by
    its content (a copy at another path). Otherwise it is loaded into run
    ``nsys-<stem>``. Incremental: a file loaded and unchanged is not read again.
    """
    from tracehouse.core.warehouse import Warehouse
    from tracehouse.ingest import lake
    from tracehouse.ingest.discover import sanitize_run_name
    from tracehouse.ingest.runner import ingest_paths
    from tracehouse.ingest.trace_types import display_path

    path = display_path(file.resolve())
    manifest = lake.read_manifest(Warehouse(root)) if (root / "lake").is_dir() else []
    same_path = sorted(e.run_id for e in manifest if e.path == path)
    if not same_path and manifest:
        same_content = _same_content(file, manifest)
        if same_content:
            print(f"note: {path} has the same content as {same_content[0].path}, already in "
                  f"run {same_content[0].run_id!r} of {root}: showing that", file=sys.stderr)
            return [e.trace_id for e in same_content]
    run_id = same_path[0] if same_path else sanitize_run_name(f"nsys-{file.stem}")
    result = ingest_paths([file], warehouse=root, run=run_id, jobs=1, progress=False,
                          stream=sys.stderr)
    if result.failed:  # ingest already printed why, one line per file
        raise NsysViewError(f"{display_path(file)}: not loaded, so there is nothing to show")
    rows = sorted((e for e in lake.read_manifest(Warehouse(root))
                   if e.run_id == run_id and e.path == path), key=lambda e: e.rank)
    if not rows:
        raise NsysViewError(f"{file}: nothing was loaded from it")
    return [e.trace_id for e in rows]


def _same_content(file: Path, manifest: list[Any]) -> list[Any]:
    """The loaded traces (one run's, by rank) whose file had the bytes of ``file``."""
    from tracehouse.ingest.nsys.load import file_hash
    from tracehouse.ingest.trace_types import TraceError

    try:
        digest = file_hash(file)
    except TraceError:
        return []  # unreadable: ingest reports it
    found = [e for e in manifest if e.content_hash == digest]
    runs = sorted({e.run_id for e in found})
    return sorted((e for e in found if e.run_id == runs[0]), key=lambda e: e.rank) if runs else []


def build_marts(root: Path, trim: tuple[float, float] | None = None,
                marts: tuple[str, ...] = ALL_VIEW_MARTS) -> None:
    """Build ``marts`` (dbt selectors; default: every view's) and what they are built
    from (models only, no tests: a view, not a CI run), for the capture window ``trim``
    in seconds when given."""
    from tracehouse.build.dbt import run_dbt

    variables: dict[str, int] = {}
    if trim is not None:
        variables = {"capture_window_start_ns": round(trim[0] * 1e9),
                     "capture_window_end_ns": round(trim[1] * 1e9)}
    args = ["build", "--quiet", "--select", *marts,
            "--exclude-resource-type", "test", "--exclude-resource-type", "unit_test"]
    if variables:
        args += ["--vars", json.dumps(variables)]
    from tracehouse.build.dbt import is_up_to_date

    if is_up_to_date(root, args):
        return  # neither the project nor the lake changed since these marts were built
    # dbt runs quiet; say what the seconds are spent on.
    print(f"building the marts for the Nsight views in {root} (dbt build, about 10 s)…",
          file=sys.stderr, flush=True)
    with contextlib.redirect_stdout(sys.stderr):
        code = run_dbt(args, root)
    if code != 0:
        raise NsysViewError(f"building the marts in {root} failed (dbt exit {code})")


# ---- the views: one query each on the marts ---------------------------------------------

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _ms(ns: Any) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, 3)


def _gpu_figures(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> dict[str, Any]:
    """One GPU's kernel figures over the capture, as nsys-ai's summary and overlap count
    them: kernels only (copies and fills left out, so a copy counts as idle).

    Counts, sums and the span from ``fct_kernels``; the unions of compute and of
    communication kernels and their overlap from ``fct_rank_iterations`` (HTA's span
    figures, per iteration: an export with ProfilerStep ranges has several), whose
    iterations hold disjoint kernels, so they add up. idle = span - busy.
    """
    figures = _rows(con, """
        select count(*) as kernels, count(distinct stream) as streams,
            max(end_ns) - min(ts_ns) as span_ns,
            cast(coalesce(sum(dur_ns), 0) as bigint) as kernel_time_ns,
            count(*) filter (where kind <> 'communication') as compute_kernels,
            count(*) filter (where kind = 'communication') as nccl_kernels
        from fct_kernels where run_id = ? and rank = ? and category = 'kernel'""",
                    [run_id, rank])[0]
    figures |= _rows(con, """
        select cast(coalesce(sum(compute_ns), 0) as bigint) as compute_ns,
            cast(coalesce(sum(communication_ns), 0) as bigint) as communication_ns,
            cast(coalesce(sum(overlap_ns), 0) as bigint) as overlap_ns
        from fct_rank_iterations
        where run_id = ? and rank = ?""", [run_id, rank])[0]
    busy = figures["compute_ns"] + figures["communication_ns"] - figures["overlap_ns"]
    figures["idle_ns"] = None if figures["span_ns"] is None else figures["span_ns"] - busy
    return figures


def _summary(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, _base in _gpu_of(con, trace_ids, gpu):
        figures = _gpu_figures(con, run_id, rank)
        if not figures["kernels"]:
            continue  # nsys-ai lists GPUs with kernels
        key = [run_id, rank]
        top = _rows(con, """
            select short_name, count(*) as kernel_count, sum(dur_ns) as total_dur_ns,
                sum(dur_ns) / sum(sum(dur_ns)) over () as share_ratio
            from fct_kernels where run_id = ? and rank = ? and category = 'kernel'
            group by short_name order by total_dur_ns desc, short_name limit ?""",
                    [*key, TOP_KERNELS])
        streams = _rows(con, """
            select stream, count(*) as kernel_count,
                count(*) filter (where kind = 'communication') as communication_kernel_count,
                sum(dur_ns) as total_dur_ns
            from fct_kernels where run_id = ? and rank = ? and category = 'kernel'
            group by stream order by stream""", key)
        span = figures["span_ns"]
        out.append({
            "gpu": device, "rank": rank, "kernels": figures["kernels"],
            "span_ms": _ms(span), "compute_ms": _ms(figures["kernel_time_ns"]),
            "idle_ms": _ms(figures["idle_ns"]),
            "util_pct": round(100 * figures["kernel_time_ns"] / span, 1) if span else None,
            "top_kernels": [{"name": t["short_name"], "count": t["kernel_count"],
                             "total_ms": _ms(t["total_dur_ns"]),
                             "pct": round(100 * t["share_ratio"], 1)} for t in top],
            "streams": [{"stream": s["stream"], "kernels": s["kernel_count"],
                         "nccl_kernels": s["communication_kernel_count"],
                         "total_ms": _ms(s["total_dur_ns"])} for s in streams],
        })
    return out


def _overlap(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, _base in _gpu_of(con, trace_ids, gpu):
        f = _gpu_figures(con, run_id, rank)
        if not f["kernels"]:
            continue
        overlap, communication = f["overlap_ns"], f["communication_ns"]
        out.append({
            "gpu": device, "rank": rank, "span_ms": _ms(f["span_ns"]),
            "compute_only_ms": _ms(f["compute_ns"] - overlap),
            "nccl_only_ms": _ms(communication - overlap), "overlap_ms": _ms(overlap),
            "idle_ms": _ms(f["idle_ns"]),
            "overlap_pct": round(100 * overlap / communication, 1) if communication else None,
            "compute_kernels": f["compute_kernels"], "nccl_kernels": f["nccl_kernels"],
        })
    return out


def _nccl(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, _base in _gpu_of(con, trace_ids, gpu):
        for r in _rows(con, """
                select stream, comm_op as op, count(*) as kernel_count,
                    sum(dur_ns) as total_dur_ns, avg(dur_ns) as mean_dur_ns,
                    min(dur_ns) as min_dur_ns, max(dur_ns) as max_dur_ns,
                    sum(dur_ns) / sum(sum(dur_ns)) over () as share_ratio
                from fct_kernels
                where run_id = ? and rank = ? and category = 'kernel'
                    and kind = 'communication'
                group by stream, comm_op
                order by stream, total_dur_ns desc""", [run_id, rank]):
            out.append({
                "gpu": device, "rank": rank, "stream": r["stream"], "op": r["op"],
                "count": r["kernel_count"], "total_ms": _ms(r["total_dur_ns"]),
                "mean_ms": _ms(r["mean_dur_ns"]), "min_ms": _ms(r["min_dur_ns"]),
                "max_ms": _ms(r["max_dur_ns"]), "pct": round(100 * r["share_ratio"], 1),
            })
    return out


def _gpu_of(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    """(run_id, rank, device, base_time_ns) of each GPU asked for, in device order."""
    return con.execute("""
        select traces.run_id, traces.rank,
            (traces.distributed_info::json ->> 'nsys_device')::bigint as device,
            traces.base_time_ns
        from stg_lake__traces as traces
        where traces.trace_id in (select unnest(?::varchar[]))
            and (? is null or (traces.distributed_info::json ->> 'nsys_device')::bigint = ?)
        order by device""", [trace_ids, gpu, gpu]).fetchall()


def _info(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, base in _gpu_of(con, trace_ids, gpu):
        (kernels, streams, first, last), = con.execute("""
            select count(*), count(distinct stream), min(ts_ns), max(end_ns)
            from fct_kernels where run_id = ? and rank = ? and category = 'kernel'""",
                                                       [run_id, rank]).fetchall()
        (ranges,), = con.execute(
            "select count(*) from fct_annotation_ranges "
            "where run_id = ? and rank = ? and annotation_kind = 'nvtx'",
            [run_id, rank]).fetchall()
        (props,), = con.execute(
            "select device_properties from stg_lake__traces where run_id = ? and rank = ?",
            [run_id, rank]).fetchall()
        out.append({
            "gpu": device, "rank": rank, "run": run_id, "kernels": kernels, "streams": streams,
            "nvtx_ranges": ranges,
            "start_s": None if first is None else round((first - base) / 1e9, 6),
            "end_s": None if last is None else round((last - base) / 1e9, 6),
            "device": json.loads(props)[0] if props else None,
        })
    return out


def _iters(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, base in _gpu_of(con, trace_ids, gpu):
        for r in _rows(con, """
                select * from fct_nsys_iterations where run_id = ? and rank = ?
                order by iteration""", [run_id, rank]):
            out.append({
                "gpu": device, "rank": rank, "iteration": r["iteration"],
                "text": r["marker_name"], "heuristic": r["is_heuristic"],
                "gpu_start_s": round((r["gpu_start_ns"] - base) / 1e9, 6)
                if r["gpu_start_ns"] is not None else None,
                "duration_ms": _ms(r["gpu_span_ns"]), "compute_ms": _ms(r["compute_ns"]),
                "nccl_ms": _ms(r["communication_ns"]), "kernel_count": r["kernel_count"],
                "nccl_count": r["communication_kernel_count"],
            })
    return out


def _tree(con: duckdb.DuckDBPyConnection, trace_ids: list[str], gpu: int | None) -> list:
    out = []
    for run_id, rank, device, base in _gpu_of(con, trace_ids, gpu):
        for r in _rows(con, """
                select slice_id, parent_range_id, name, annotation_depth, annotation_path,
                    kernel_count, own_kernel_count, gpu_start_ns, gpu_end_ns, gpu_span_ns, ts_ns
                from fct_annotation_ranges
                where run_id = ? and rank = ? and annotation_kind = 'nvtx' and kernel_count > 0
                order by gpu_start_ns, annotation_depth, ts_ns""", [run_id, rank]):
            out.append({
                "gpu": device, "rank": rank, "id": r["slice_id"],
                "parent_id": r["parent_range_id"], "name": r["name"],
                "depth": r["annotation_depth"], "path": r["annotation_path"],
                "kernels": r["kernel_count"],
                "own_kernels": r["own_kernel_count"],
                "gpu_start_s": round((r["gpu_start_ns"] - base) / 1e9, 6),
                "gpu_ms": _ms(r["gpu_span_ns"]),
            })
    return out


_QUERIES = {"info": _info, "summary": _summary, "overlap": _overlap, "nccl": _nccl,
            "iters": _iters, "tree": _tree}


# ---- table format ---------------------------------------------------------------------

def format_table(view: str, result: list[dict[str, Any]]) -> str:
    """The view as aligned text (trace strings shown as they are, one line each)."""
    from tracehouse.query.sql import write_table

    if view == "summary":
        parts = []
        for gpu in result:
            parts.append(
                f"GPU {gpu['gpu']} (rank {gpu['rank']}): span {gpu['span_ms']} ms | compute "
                f"{gpu['compute_ms']} ms | idle {gpu['idle_ms']} ms | util {gpu['util_pct']}% | "
                f"{gpu['kernels']} kernels")
            parts.append(_table(["pct", "total_ms", "count", "name"],
                                [[k["pct"], k["total_ms"], k["count"], k["name"]]
                                 for k in gpu["top_kernels"]], write_table))
            parts.append(_table(["stream", "kernels", "nccl_kernels", "total_ms"],
                                [list(s.values()) for s in gpu["streams"]], write_table))
        return "\n".join(parts)
    rows = result
    if view == "tree":
        rows = [{"gpu": r["gpu"], "node": "  " * (r["depth"] or 0) + r["name"],
                 "kernels": r["kernels"], "gpu_ms": r["gpu_ms"],
                 "gpu_start_s": r["gpu_start_s"]} for r in result]
    if view == "info":
        rows = [{k: v for k, v in r.items() if k != "device"}
                | {"device": (r["device"] or {}).get("name")} for r in result]
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    return _table(columns, [[r.get(c) for c in columns] for r in rows], write_table)


def _table(columns: list[str], rows: list[list[Any]], write_table: Any) -> str:
    import io

    buffer = io.StringIO()
    write_table(columns, [[tuple(row) for row in rows]], buffer)
    return buffer.getvalue().rstrip("\n")
