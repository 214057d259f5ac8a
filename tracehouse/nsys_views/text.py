"""A view of ``tracehouse nsys`` as aligned text (its table format)."""

from __future__ import annotations

from typing import Any


def format_table(view: str, result: list[dict[str, Any]]) -> str:
    """The view as aligned text (trace strings shown as they are, one line each)."""
    from tracehouse.query.result_formats import write_table

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
