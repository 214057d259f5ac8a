"""``export_perfetto``: open the database, select ranks, lay out and write every mart's slices.

The file is written under a temporary name beside ``out`` and renamed into
place, so a reader never sees half a trace.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb

from tracehouse.core.warehouse import Warehouse

from .json_writer import JsonSink
from .layout import TrackAllocator, grouped_by_track
from .proto_writer import ProtoSink
from .queries import (
    FLOWS_TABLE,
    cpu_collective_slices,
    cpu_step_slices,
    has_offsets,
    json_origin,
    kernel_slices,
    mart_tables,
    select_ranks,
    table_columns,
)
from .slices import ExportError, ExportResult, Rank, Sink

#: Output formats of :func:`export_perfetto`.
FORMATS = ("proto", "json")


def export_perfetto(
    warehouse_root: Path,
    run_id: str,
    out: Path,
    ranks: Sequence[int] | None = None,
    pp_group: int | None = None,
    replica: int | None = None,
    fmt: str = "proto",
) -> ExportResult:
    """Write one merged timeline of the selected ranks of ``run_id`` to ``out``.

    Args:
        warehouse_root: the warehouse folder (its ``tracehouse.duckdb`` is
            opened read-only).
        run_id: the run.
        out: the file to write; written to a temporary name next to it and
            renamed into place, so a reader never sees half a trace.
        ranks: global ranks to include.
        pp_group: only ranks whose ``dim_ranks.pp_group_index`` is this.
        replica: only ranks whose ``dim_ranks.model_replica`` is this.
            Selectors combine (intersection); none selects every rank.
        fmt: ``proto`` (Perfetto protobuf) or ``json`` (Chrome JSON).

    Raises:
        ExportError: no built database, unknown run, ranks not in the run,
            an empty selection or an unknown format; the message says what
            to do.
    """
    started = time.monotonic()
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    place = Warehouse(Path(warehouse_root).resolve())
    if not place.database.is_file():
        raise ExportError(f"{place.database} does not exist: load traces and build the "
                          f"warehouse first (`tracehouse ingest PATH --warehouse {place.root}` "
                          f"then `tracehouse build --warehouse {place.root}`)")
    out = Path(out)
    try:
        con = duckdb.connect(str(place.database), read_only=True)
    except duckdb.Error as exc:
        hint = (" (is `tracehouse build` or ingest writing it? retry when it is done)"
                if "lock" in str(exc).lower() else "")
        raise ExportError(f"cannot open {place.database}: {exc}{hint}") from exc
    try:
        tables = mart_tables(con)
        missing = {"dim_ranks", "fct_kernels"} - tables
        if missing:
            raise ExportError(f"{place.database} has no {', '.join(sorted(missing))}: run "
                              f"`tracehouse build --warehouse {place.root}`")
        selected = select_ranks(con, run_id, ranks, pp_group, replica)
        result = ExportResult(path=out, fmt=fmt, run_id=run_id,
                              ranks=tuple(rank.rank for rank in selected))
        result.offsets_applied = has_offsets(con, tables, run_id)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                sink: Sink
                if fmt == "proto":
                    sink = ProtoSink(handle)
                else:
                    result.origin_ns = json_origin(con, tables, run_id, list(result.ranks),
                                               result.offsets_applied)
                    sink = JsonSink(handle, result.origin_ns, run_id)
                _write_tracks(con, tables, run_id, selected, sink, result)
                sink.close()
            _readable(Path(tmp_name))
            os.replace(tmp_name, out)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    finally:
        con.close()
    result.bytes_written = out.stat().st_size
    result.seconds = time.monotonic() - started
    return result


def _readable(path: Path) -> None:
    """Give a temporary file (created 0600) the permissions a new file would have."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _write_tracks(con: duckdb.DuckDBPyConnection, tables: set[str], run_id: str,
                  selected: list[Rank], sink: Sink, result: ExportResult) -> None:
    """Every selected rank's process track, then its CPU steps, CPU collectives and kernels."""
    by_rank = {rank.rank: rank for rank in selected}
    for rank in selected:
        sink.process(rank)
        result.process_names[rank.rank] = rank.name
    writer = TrackAllocator(sink, result)
    rank_list = [rank.rank for rank in selected]
    offsets = result.offsets_applied

    if "fct_cpu_steps" in tables:
        result.cpu_steps_source = "fct_cpu_steps"
        for lanes, item in grouped_by_track(cpu_step_slices(con, run_id, rank_list, offsets),
                                            by_rank, writer):
            lanes.add(item)
            result.cpu_step_slices += 1

    flows = FLOWS_TABLE in tables
    if "fct_cpu_collectives" in tables:
        for lanes, item in grouped_by_track(
                cpu_collective_slices(con, run_id, rank_list, offsets, flows), by_rank, writer):
            lanes.add(item)
            result.cpu_collective_slices += 1
            result.flows += int(item.flow is not None and item.flow[1] == 1)

    kernel_columns = table_columns(con, "fct_kernels")
    for lanes, item in grouped_by_track(
            kernel_slices(con, run_id, rank_list, offsets, kernel_columns, flows),
            by_rank, writer):
        lanes.add(item)
        result.kernel_slices += 1
        result.flows += int(item.flow is not None and item.flow[1] == 1)
