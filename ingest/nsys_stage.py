"""Stage an Nsight export's activity tables in a scratch DuckDB database, batch by batch.

Why staged: the mapping to lake rows (:mod:`ingest.nsys`) is SQL that reads
kernels, copies, CUDA calls and NVTX events several times (per GPU, for the
process-to-GPU vote). Held as Arrow, those tables cost their full width in
memory for the whole load (2.4 GB of RSS for a 190 MB export). Streamed
from ADBC into a DuckDB database file, they are compressed (NVTX: 290 →
29 MiB) and paged by DuckDB's buffer manager. No memory limit is set: a
fixed one made the per-GPU sort fail (out of memory) on a 190 MB export,
so DuckDB keeps its default (80% of RAM) and spills beside the file.

Only the columns ingest maps are read (``_Source.columns``); a column this
export lacks reads as NULL, and every column is cast to one type, so the
SQL binds one way on every nsys version.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from .model import TraceError
from .nsys_read import NsysDatabase

#: Columns read as something other than integers (every other column is int64).
_COLUMN_TYPES = {"text": pa.string(), "jsonText": pa.string(), "doubleValue": pa.float64(),
                 "floatValue": pa.float64()}


@dataclass(frozen=True)
class Source:
    """One activity table of the export and the columns we read from it."""

    base: str
    columns: tuple[str, ...]

    @property
    def schema(self) -> pa.Schema:
        """The columns' types, whatever SQLite held: the ADBC driver types a column
        by its values, so a TEXT column that is all NULL (NVTX ``text`` in exports
        that name ranges by ``textId``) or one this export lacks arrives as int64."""
        return pa.schema([(c, _COLUMN_TYPES.get(c, pa.int64())) for c in self.columns])


KERNEL = Source("CUPTI_ACTIVITY_KIND_KERNEL", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
    "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
    "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "graphId",
    "graphNodeId", "launchType"))
MEMCPY = Source("CUPTI_ACTIVITY_KIND_MEMCPY", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
    "srcKind", "dstKind", "graphNodeId"))
MEMSET = Source("CUPTI_ACTIVITY_KIND_MEMSET", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "value",
    "memKind", "graphNodeId"))
GRAPH = Source("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"))
RUNTIME = Source("CUPTI_ACTIVITY_KIND_RUNTIME", (
    "start", "end", "globalTid", "correlationId", "nameId", "returnValue"))
DRIVER = Source("CUPTI_ACTIVITY_KIND_DRIVER", (
    "start", "end", "globalTid", "correlationId", "nameId", "returnValue"))
NVTX = Source("NVTX_EVENTS", (
    "start", "end", "eventType", "rangeId", "category", "text", "globalTid", "endGlobalTid",
    "textId", "domainId", "uint64Value", "int64Value", "doubleValue", "uint32Value",
    "int32Value", "floatValue", "jsonText"))

#: The staged tables by name; those that must exist (empty when the export lacks them)
#: and those the SQL leaves out when absent.
SOURCES = {"kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET, "graph": GRAPH,
           "runtime": RUNTIME, "driver": DRIVER, "nvtx": NVTX}
ALWAYS = ("kernel", "memcpy", "memset", "runtime", "nvtx")

@contextmanager
def scratch_duckdb() -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB database in a temporary folder (compressed, paged to disk), removed after."""
    with tempfile.TemporaryDirectory(prefix="tracehouse-nsys-stage-") as tmp:
        con = duckdb.connect(str(Path(tmp) / "stage.duckdb"))
        try:
            con.execute(f"set temp_directory = '{Path(tmp) / 'spill'}'")
            yield con
        finally:
            con.close()


def stage_activity(db: NsysDatabase, con: duckdb.DuckDBPyConnection) -> set[str]:
    """Create one DuckDB table per activity table; return the names the export has.

    Tables of :data:`ALWAYS` are created empty when the export lacks them.
    """
    present = set()
    for key, source in SOURCES.items():
        table = db.table(source.base)
        if table is None:
            if key in ALWAYS:
                con.register("_empty", source.schema.empty_table())
                con.execute(f"create table {key} as select * from _empty")
                con.unregister("_empty")
            continue
        columns = db.columns(table)
        select = ", ".join(f'"{c}"' if c in columns else f'null as "{c}"'
                           for c in source.columns)
        failed: list[TraceError] = []
        batches = _typed(db.stream(f'select {select} from "{table}"'), source.schema, failed)
        con.register("_batches", pa.RecordBatchReader.from_batches(source.schema, batches))
        try:
            con.execute(f"create table {key} as select * from _batches")
        except duckdb.Error:
            if failed:  # DuckDB wraps what the batches raised: report that instead
                raise failed[0] from None
            raise
        con.unregister("_batches")
        present.add(key)
    return present


def _typed(batches: Iterator[pa.RecordBatch], schema: pa.Schema,
           failed: list[TraceError]) -> Iterator[pa.RecordBatch]:
    """Each batch with ``schema``'s types, so the SQL binds one way on every export.

    A :class:`TraceError` is also put in ``failed``: DuckDB, which pulls these
    batches, re-raises it as its own error type.
    """
    try:
        for batch in batches:
            try:
                yield batch.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TraceError("invalid_sqlite",
                                 f"a column holds values of an unexpected type: {exc}",
                                 "export the report again with `nsys export --type sqlite`"
                                 ) from exc
    except TraceError as exc:
        failed.append(exc)
        raise
