"""Write Parquet files with Arrow's C++ writer, without importing ``pyarrow.parquet``.

Why: ``import pyarrow.parquet`` imports ``pyarrow.fs``, and with it the bindings
of every remote filesystem (S3, GCS, Azure, HDFS) and Python's ``ssl``: about
8 MiB of RSS and 40 ms of CPU in every ingest process, which only ever writes
local files. On the small Kineto rows of benchmarks/ingest.py that is a tenth
of the whole peak (a 1.8 MB trace's ingest peaks at ~93 MiB, HTA's load at
162). Its ``ParquetWriter`` also resolves a filesystem for every file it
opens, and a trace writes seven.

:class:`ParquetWriter` builds the same C++ writer (``pyarrow._parquet``) with
the arguments ``pyarrow.parquet.ParquetWriter`` passes it, so the bytes on disk
are the same (tests/test_parquet_writer.py compares them for every kind of
options the lake uses). ``pyarrow._parquet`` is not a public module: when its
signature does not fit this pyarrow (``TypeError`` or ``ValueError`` on the
first file), the public writer is used from then on, so an upgrade costs the
memory, not the files.

Reading stays with ``pyarrow.parquet`` (imported where a lake is read: an
existing manifest or schema file), where there is no hot loop to save.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

#: What ``pyarrow.parquet.ParquetWriter`` passes the C++ writer unless told otherwise
#: (pyarrow 16-26); the lake's options override them per file.
_PUBLIC_DEFAULTS: dict[str, Any] = {
    "version": "2.6",
    "use_dictionary": True,
    "compression": "snappy",
    "write_statistics": True,
    "use_deprecated_int96_timestamps": False,
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
    "writer_engine_version": "V2",
}

#: False once the private writer refused this pyarrow's arguments.
_core_usable = True


class ParquetWriter:
    """A Parquet file at ``path`` with ``schema``: ``write_table`` any number of times,
    then ``close`` (or use it as a context manager).

    ``options``: those of ``pyarrow.parquet.ParquetWriter`` (compression,
    use_dictionary, write_statistics, column_encoding, ...). Raises
    ``FileNotFoundError`` when the folder does not exist, as the public writer does.
    """

    def __init__(self, path: Path | str, schema: pa.Schema, **options: Any):
        self.schema = schema
        self._sink: pa.NativeFile | None = None
        self._writer = _open_core(path, schema, options, self) if _core_usable else None
        if self._writer is None:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(path, schema, **options)

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if not table.schema.equals(self.schema, check_metadata=False):
            raise ValueError(f"table schema does not match the file's:\n{table.schema}\n"
                             f"vs.\n{self.schema}")
        self._writer.write_table(table, row_group_size=row_group_size)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            if self._sink is not None:
                self._sink.close()
                self._sink = None

    def __enter__(self) -> ParquetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_core(path: Path | str, schema: pa.Schema, options: dict[str, Any],
               owner: ParquetWriter) -> Any:
    """The C++ writer on a new local file, or None when this pyarrow's private
    writer does not take the public writer's arguments (then never tried again)."""
    global _core_usable
    try:
        from pyarrow._parquet import ParquetWriter as CoreWriter
    except ImportError:
        _core_usable = False
        return None
    sink = pa.OSFile(str(path), "wb")  # FileNotFoundError for a missing folder
    try:
        writer = CoreWriter(sink, schema, **{**_PUBLIC_DEFAULTS, **options})
    except (TypeError, ValueError):
        sink.close()
        _core_usable = False
        return None
    except BaseException:
        sink.close()
        raise
    owner._sink = sink
    return writer


def write_schema_file(schema: pa.Schema, path: Path | str) -> None:
    """A Parquet file of ``schema`` and no row group, as ``pyarrow.parquet.write_metadata``
    writes a ``_common_metadata`` summary (without a metadata collector)."""
    ParquetWriter(path, schema).close()
