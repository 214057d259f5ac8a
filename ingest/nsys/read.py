"""Read an Nsight Systems SQLite export into Arrow tables, and nothing more.

Why ADBC: ``adbc-driver-sqlite`` hands whole result sets over as Arrow
record batches from C, where :mod:`sqlite3` builds one Python tuple per
row; on exports with millions of kernels and NVTX ranges that is the
difference between seconds and minutes. DuckDB's sqlite extension would do
the same but is downloaded at run time, which is not allowed here.

Why the checks before opening: a copy cut short keeps its 100-byte header,
so the page count written there tells a truncated file from a whole one
without reading it; and any SQLite database is not an Nsight export, so the
tables nsys always writes (``StringIds`` and the ``CUPTI_ACTIVITY_KIND_*``
family) are looked for before anything is read.

``.nsys-rep`` reports are exported with ``nsys export --type sqlite`` when
``nsys`` is on ``PATH``; otherwise one clear error says how to do it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from ..trace_types import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_SUFFIX = ".nsys-rep"
#: File names discovery treats as Nsight exports without reading them.
NSYS_SUFFIXES = (".sqlite", ".sqlite3", NSYS_REP_SUFFIX)
_VERSIONED = re.compile(r"^(?P<base>[A-Z_]+?)(?:_V(?P<version>\d+))?$")
#: Rows per Arrow record batch the driver hands over (its default is 1024): a GPU's
#: tables then come in a few dozen chunks, not thousands, which every later ``take``
#: and cast walks (a 765k-row NVTX table: 747 batches -> 12, and 10.9 -> 9.5 s to read).
BATCH_ROWS = 64 * 1024
BATCH_ROWS_OPTION = "adbc.sqlite.query.batch_rows"
#: Seconds `nsys export` may take on one report before we give up on it.
EXPORT_TIMEOUT_S = 3600


def has_sqlite_magic(path: Path) -> bool:
    """True when the file starts with SQLite's 16-byte header string."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def is_nsys_candidate(path: Path) -> bool:
    """An Nsight report or export by name, or any file that is a SQLite database."""
    name = path.name.lower()
    return name.endswith(NSYS_SUFFIXES) or has_sqlite_magic(path)


def check_sqlite_header(path: Path) -> None:
    """Raise :class:`TraceError` for a file that is not a whole SQLite database.

    The header stores the page size (bytes 16-17) and, when the "version
    valid for" number (bytes 92-95) equals the change counter (24-27), the
    database size in pages (28-31): a shorter file was cut short.
    """
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError("unreadable", f"cannot read the file: {exc.strerror}",
                         "check the path and its permissions") from exc
    if size == 0:
        raise TraceError("empty", "the file is empty",
                         "export the report again with `nsys export --type sqlite`")
    if not header.startswith(SQLITE_MAGIC):
        raise TraceError("not_nsys", "not a SQLite database (no SQLite header), so not an "
                         "Nsight Systems export",
                         "export the report with `nsys export --type sqlite --output "
                         "FILE.sqlite REPORT.nsys-rep`")
    if len(header) < 100:
        raise TraceError("truncated", "the SQLite header is cut short (truncated file)",
                         "copy the file again, or export it again")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = int.from_bytes(header[24:28], "big")
    pages = int.from_bytes(header[28:32], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    if pages and valid_for == change_counter and size < pages * page_size:
        raise TraceError("truncated", f"the database is cut short: {size} bytes of the "
                         f"{pages * page_size} its header announces (truncated file)",
                         "copy the file again, or export it again")


@contextmanager
def exported_sqlite(path: Path) -> Iterator[Path]:
    """The SQLite export to read for ``path``: itself, or a temporary export of a report."""
    if not path.name.lower().endswith(NSYS_REP_SUFFIX):
        yield path
        return
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError("nsys_rep_needs_export", "an .nsys-rep report cannot be read "
                         "directly and `nsys` is not on PATH to export it",
                         f"run `nsys export --type sqlite --output {path.stem}.sqlite "
                         f"{path.name}` and ingest the .sqlite file, or put nsys on PATH")
    with tempfile.TemporaryDirectory(prefix="tracehouse-nsys-") as tmp:
        out = Path(tmp) / f"{path.stem}.sqlite"
        try:
            done = subprocess.run(
                [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
                 "--output", str(out), str(path)],
                capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TraceError("nsys_export_failed", f"`nsys export` failed: {exc}",
                             "export the report by hand and ingest the .sqlite") from exc
        if done.returncode != 0 or not out.exists():
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise TraceError("nsys_export_failed",
                             f"`nsys export` exited {done.returncode}: {detail[0]}",
                             "export the report by hand and ingest the .sqlite")
        yield out


class NsysDatabase:
    """A read-only ADBC connection to one export, with its table names resolved.

    Nsight 2025+ may suffix tables with ``_V2``/``_V3``; :meth:`table`
    returns the exact name when present, else the highest version.
    """

    def __init__(self, path: Path) -> None:
        import adbc_driver_sqlite.dbapi as adbc_sqlite

        check_sqlite_header(path)
        uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        try:
            self._conn = adbc_sqlite.connect(uri)
            names = self.query("select name from sqlite_master where type = 'table'")
        except Exception as exc:  # noqa: BLE001 - the driver raises its own error types
            raise _database_error(exc) from exc
        self.tables = set(names.column("name").to_pylist())
        if "StringIds" not in self.tables or not any(
                t.startswith("CUPTI_ACTIVITY_KIND_") or t.startswith("NVTX_EVENTS")
                for t in self.tables):
            self.close()
            raise TraceError("not_nsys", "a SQLite database, but not an Nsight Systems export "
                             "(no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)",
                             "export the report with `nsys export --type sqlite`")

    def table(self, base: str) -> str | None:
        """The name of table ``base`` in this export (exact, else highest ``_V<n>``)."""
        if base in self.tables:
            return base
        versions = []
        for name in self.tables:
            match = _VERSIONED.match(name)
            if match and match.group("base") == base and match.group("version"):
                versions.append((int(match.group("version")), name))
        return max(versions)[1] if versions else None

    def columns(self, table: str) -> set[str]:
        info = self.query(f"select name from pragma_table_info('{table}')")
        return set(info.column("name").to_pylist())

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` (built from table names this class resolved, never from data)."""
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(sql)
                return repair_utf8(cursor.fetch_arrow_table())
        except TraceError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _database_error(exc) from exc

    def query_batches(self, sql: str,
                      each: Callable[[pa.RecordBatch], pa.RecordBatch]) -> pa.Table:
        """Run ``sql`` and build its result batch by batch, ``each`` applied to every
        record batch as the driver hands it over (a cast, so a column is never held
        in two types at once)."""
        try:
            with self._conn.cursor() as cursor:
                cursor.adbc_statement.set_options(**{BATCH_ROWS_OPTION: str(BATCH_ROWS)})
                cursor.execute(sql)
                reader = cursor.fetch_record_batch()
                batches = [each(batch) for batch in reader]
                schema = (batches[0] if batches else each(
                    pa.RecordBatch.from_pylist([], schema=reader.schema))).schema
                return repair_utf8(pa.Table.from_batches(batches, schema))
        except TraceError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _database_error(exc) from exc

    def stream(self, sql: str, each: Callable[[pa.RecordBatch], pa.RecordBatch],
               batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Run ``sql`` and yield its result ``batch_rows`` rows at a time, ``each`` applied
        to every record batch as the driver hands it over; nothing of the result is held
        here, so an ``order by`` that SQLite sorts in its own bounded memory (it spills
        to temporary files) reaches the caller in bounded batches."""
        try:
            with self._conn.cursor() as cursor:
                cursor.adbc_statement.set_options(**{BATCH_ROWS_OPTION: str(batch_rows)})
                cursor.execute(sql)
                for batch in cursor.fetch_record_batch():
                    yield repair_utf8_batch(each(batch))
        except TraceError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _database_error(exc) from exc

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> NsysDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def repair_utf8(table: pa.Table) -> pa.Table:
    """Replace invalid UTF-8 in string columns with U+FFFD.

    SQLite stores TEXT bytes as given, and the ADBC driver copies them into
    Arrow strings unchecked; a process name or NVTX text that is not UTF-8
    would make invalid Arrow data that fails later, far from its cause.
    Valid columns (all of them, normally) are checked once and kept as they are.
    """
    for index, field in enumerate(table.schema):
        if not pa.types.is_string(field.type) and not pa.types.is_large_string(field.type):
            continue
        column = table.column(index)
        try:
            column.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        raw = column.cast(pa.binary() if pa.types.is_string(field.type) else pa.large_binary())
        fixed = pa.array([None if b is None else b.decode("utf-8", "replace")
                          for b in raw.to_pylist()], field.type)
        table = table.set_column(index, field, fixed)
    return table


def repair_utf8_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """:func:`repair_utf8` of one record batch."""
    if not batch.num_rows:
        return batch
    return repair_utf8(pa.Table.from_batches([batch])).to_batches()[0]


def _database_error(exc: Exception) -> TraceError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    lowered = text.lower()
    if "malformed" in lowered or "disk image" in lowered or "corrupt" in lowered:
        return TraceError("truncated", f"the SQLite database is damaged: {text}",
                          "copy the file again, or export it again")
    if "not a database" in lowered or "encrypted" in lowered:
        return TraceError("not_nsys", f"not a readable SQLite database: {text}",
                          "export the report with `nsys export --type sqlite`")
    return TraceError("invalid_sqlite", f"cannot read the SQLite export: {text}",
                      "export the report again with `nsys export --type sqlite`")
