"""One view of an Nsight Systems export: load it, build the marts, query them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracehouse.nsys_views import VIEWS, NsysUsageError
from tracehouse.nsys_views.load import (
    VIEW_MARTS,
    build_marts,
    devices,
    ingest_file,
    is_temporary,
    warehouse_for,
)
from tracehouse.nsys_views.queries import query_view

__all__ = ["nsys_view"]


def nsys_view(view: str, file: Path, *, warehouse: str | Path | None = None,
              gpu: int | None = None, trim: tuple[float, float] | None = None) -> Any:
    """Ingest ``file``, build the marts the views read and return one view as JSON-ready
    data.

    Raises :class:`NsysViewError` when the file fails to load or the build fails.
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}")
    with warehouse_for(warehouse, trim is not None) as root:
        trace_ids = ingest_file(file, root)
        gpus = devices(root, trace_ids)
        if gpu is not None and gpu not in gpus:
            listed = ", ".join(str(d) for d in gpus)
            raise NsysUsageError(f"{file}: no GPU {gpu} (GPUs: {listed})")
        build_marts(root, trim, VIEW_MARTS[view],
                    throwaway=is_temporary(warehouse, trim is not None))
        return query_view(root, view, trace_ids, gpu)
