"""Rows put aside on disk now and read back in order later: an Arrow IPC stream file.

Why: an Nsight GPU's ``slices`` file holds its device work first, then its CPU
rows (the ``has_role`` rows before the others, :mod:`ingest.lake`), but the
device work's context (the CUDA call that launched each kernel, the NVTX range
around that call) is known only once the CPU rows have been read. The loader
reads the CPU rows first and puts them aside here, a batch at a time, until
the device work is written (:mod:`.stream`). LZ4-compressed Arrow buffers: a
copy and a fast codec each way, against the Parquet encoding it waits for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

_OPTIONS = ipc.IpcWriteOptions(compression="lz4")


class Spill:
    """Tables of one schema written to ``path`` and read back as they were written."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self._writer: ipc.RecordBatchStreamWriter | None = None

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = ipc.new_stream(str(self.path), self.schema, options=_OPTIONS)
        self._writer.write_table(table.cast(self.schema))
        self.rows += table.num_rows

    def tables(self) -> Iterator[pa.Table]:
        """The rows written, in order, a batch at a time (the file is then removed)."""
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        try:
            with pa.OSFile(str(self.path)) as handle:
                for batch in ipc.open_stream(handle):
                    yield pa.Table.from_batches([batch])
        finally:
            self.discard()

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.path.unlink(missing_ok=True)
