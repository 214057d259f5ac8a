"""The views of ``tracehouse nsys``: one query each on the built marts.

Each view is a function of a read-only connection, the traces (one per
GPU) of the file and an optional GPU, returning JSON-ready rows; the
figures are read from the marts, never recomputed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

#: Top kernels and tree nodes shown per GPU in the table format (JSON has all).
TOP_KERNELS = 10


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
    communication kernels and their overlap from ``fct_nsys_gpu_overlap``:
    ``fct_rank_iterations``' span figures (HTA's, per iteration: an export with
    ProfilerStep ranges has several) summed per GPU, without the step chain that
    mart joins. idle = span - busy.
    """
    figures = _rows(con, """
        select count(*) as kernels, count(distinct stream) as streams,
            max(end_ns) - min(ts_ns) as span_ns,
            cast(coalesce(sum(dur_ns), 0) as bigint) as kernel_time_ns,
            count(*) filter (where kind <> 'communication') as compute_kernels,
            count(*) filter (where kind = 'communication') as nccl_kernels
        from fct_kernels where run_id = ? and rank = ? and category = 'kernel'""",
                    [run_id, rank])[0]
    busy = _rows(con, """
        select compute_ns, communication_ns, overlap_ns from fct_nsys_gpu_overlap
        where run_id = ? and rank = ?""", [run_id, rank])
    figures |= busy[0] if busy else {"compute_ns": 0, "communication_ns": 0, "overlap_ns": 0}
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


def query_view(root: Path, view: str, trace_ids: list[str], gpu: int | None = None) -> Any:
    """One view of the built marts of ``root``, for the GPUs (traces) given."""
    con = duckdb.connect(str(root / "tracehouse.duckdb"), read_only=True)
    try:
        return _QUERIES[view](con, trace_ids, gpu)
    finally:
        con.close()
