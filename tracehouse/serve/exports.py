"""Hand-offs: a view's rows as CSV or Parquet, and its ranks and window as a Perfetto trace.

Why each view names its rows as a :class:`~tracehouse.serve.marts.Selection`:
the export is then the same query, filters and order as the view, whole
(a table the page shows a hundred rows at a time exports every row; the
timeline, drawn one kernel per pixel, exports every kernel of its window).
The files are made in memory and sent as downloads: the read-only cursor
cannot write a file (``copy … to`` is refused by ``tracehouse sql``'s
rules), and nothing is written into the warehouse.

"Open in Perfetto" calls :func:`tracehouse.reports.perfetto.export_perfetto`
(the same merged timeline as ``tracehouse export perfetto``) for the view's
ranks and window. It opens the published database read-only by itself and
writes into a private temporary folder, which is removed once the trace is
read back and sent.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from tracehouse.core.warehouse import Warehouse
from tracehouse.query.result_formats import write_csv
from tracehouse.reports.perfetto import ExportError, export_perfetto
from tracehouse.serve.annotations import annotation_selection
from tracehouse.serve.drill import iteration_selection
from tracehouse.serve.heatmap import heatmap_selection
from tracehouse.serve.kernels import kernel_selection
from tracehouse.serve.marts import Selection
from tracehouse.serve.overview import iterations_selection
from tracehouse.serve.params import BadRequest, Params
from tracehouse.serve.pipeline import pipeline_selection
from tracehouse.serve.stragglers import collective_selection, straggler_selection
from tracehouse.serve.timeline import timeline_selection, view_window

#: The views whose rows export, by the name the page uses.
SELECTIONS: dict[str, Callable[[duckdb.DuckDBPyConnection, Params], Selection]] = {
    "iterations": iterations_selection,
    "heatmap": heatmap_selection,
    "iteration": iteration_selection,
    "kernels": kernel_selection,
    "timeline": timeline_selection,
    "pipeline": pipeline_selection,
    "annotations": annotation_selection,
    "stragglers": straggler_selection,
    "collectives": collective_selection,
}
FORMATS = {"csv": "text/csv; charset=utf-8", "parquet": "application/vnd.apache.parquet"}
_BATCH = 10_000


@dataclass(frozen=True)
class Download:
    """A file the browser saves: its name, type and bytes."""

    filename: str
    content_type: str
    body: bytes


def file_name(stem: str, extension: str) -> str:
    """A file name made of ``stem`` (a run name may hold anything) with only safe characters."""
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', stem).strip('._') or 'export'}.{extension}"


def table_download(cur: duckdb.DuckDBPyConnection, params: Params,
                   _place: Warehouse) -> Download:
    """The rows of the view ``view`` (its own parameters) as ``format`` CSV or Parquet."""
    view = params.choice("view", tuple(SELECTIONS), "kernels")
    fmt = params.choice("format", tuple(FORMATS), "csv")
    selection = SELECTIONS[view](cur, params)
    if fmt == "parquet":
        buffer = io.BytesIO()
        pq.write_table(cur.sql(selection.ordered, params=selection.params).to_arrow_table(),
                       buffer)
        body = buffer.getvalue()
    else:
        result = cur.execute(selection.ordered, selection.params)
        text = io.StringIO()
        columns = [column[0] for column in result.description]
        write_csv(columns, iter(lambda: result.fetchmany(_BATCH), []), text)
        body = text.getvalue().encode("utf-8")
    return Download(file_name(selection.name, fmt), FORMATS[fmt], body)


def perfetto_download(cur: duckdb.DuckDBPyConnection, params: Params,
                      place: Warehouse) -> Download:
    """The timeline's ranks and window as a Perfetto trace (protobuf)."""
    run_id, ranks, window = view_window(cur, params)
    span = (window["origin"] + window["start"], window["origin"] + window["end"])
    with tempfile.TemporaryDirectory(prefix="tracehouse-serve-") as folder:
        out = Path(folder) / "view.pftrace"
        try:
            export_perfetto(place.root, run_id, out, ranks=ranks, window=span)
        except ExportError as exc:
            raise BadRequest(str(exc)) from exc
        body = out.read_bytes()
    return Download(file_name(f"{run_id}-ranks{ranks[0]}-{ranks[-1]}", "pftrace"),
                    "application/octet-stream", body)


#: Download paths: path → the function making the file.
DOWNLOADS: dict[str, Callable[[duckdb.DuckDBPyConnection, Params, Warehouse], Download]] = {
    "/export/table": table_download,
    "/export/perfetto": perfetto_download,
}

__all__: list[Any] = ["DOWNLOADS", "Download", "SELECTIONS", "file_name"]
