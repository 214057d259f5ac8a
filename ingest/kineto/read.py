"""The JSON text of a Kineto trace file: read, gunzipped, its failures worded.

Why its own module: every engine reads a file the same way (the native
parsers and Perfetto's, which also needs the compressed bytes), and the
runner hashes what this returns; reading is one job, parsing another.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..trace_types import TraceError

try:
    from .._gunzip import single_member as _single_member
except ImportError:  # built without a C compiler or zlib's headers: Python's zlib below
    _single_member = None


def read_trace_bytes(path: Path) -> tuple[bytes, bytes, str]:
    """Raw file bytes, the JSON text (gunzipped if gzip), and the file format."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError("unreadable", f"cannot read the file: {exc.strerror}",
                         "check the path and its permissions") from exc
    if raw[:2] != b"\x1f\x8b" and path.name.endswith(".gz"):
        raise TraceError("invalid_gzip", "not gzip data: the name ends in .gz but the file "
                         "does not start with the gzip header",
                         "the file is damaged or misnamed; copy it again, or rename it "
                         "to .json if it is plain JSON")
    if raw[:2] == b"\x1f\x8b":
        try:
            return raw, gunzip(raw), "kineto_json_gz"
        except EOFError as exc:
            raise TraceError("truncated", "the gzip stream ends early (truncated file)",
                             "the copy or the profiler's write was cut short; copy it "
                             "again") from exc
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise TraceError("invalid_gzip", f"corrupt gzip data: {exc}",
                             "the file is damaged; copy it again") from exc
    return raw, raw, "kineto_json"


def gunzip(raw: bytes) -> bytes:
    """Decompress a gzip file into one buffer of its final size.

    The gzip trailer holds the size (mod 2^32) and CRC-32 of the last member;
    ``zlib.decompress`` with that size as its buffer writes the text into a
    single allocation (``gzip.decompress`` grows a list of blocks and joins
    them: twice the text at its peak, 53 MB more on a 53 MB trace) and is
    ~1.5x faster. ``zlib`` stops after the first member, so the text is used
    only when its size and CRC match the trailer (a single-member file, which
    is what PyTorch writes; the CRC costs ~2 ms per 10 MB); anything else
    (several members, trailing bytes, damage, truncation) goes to
    ``gzip.decompress``, which reads every member and raises the errors the
    caller words. With the compiled ``_gunzip`` (ingest/_gunzip.c) zlib
    itself checks the member's CRC and that no byte follows it, which saves
    the second CRC pass (~1 ms per MB of JSON).
    """
    size = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else -1
    # Deflate expands at most ~1032x: a damaged trailer must not size a 4 GiB buffer.
    if 0 <= size <= len(raw) * 1032 and _single_member is not None:
        # Compiled: zlib checks the CRC and tells a single member apart itself.
        text = _single_member(raw, size)
        if text is not None:
            return text
    elif 0 <= size <= len(raw) * 1032:
        crc = int.from_bytes(raw[-8:-4], "little")
        try:
            text = zlib.decompress(raw, 31, max(size, 1))
        except zlib.error:
            text = None
        if text is not None and len(text) % 2**32 == size and zlib.crc32(text) == crc:
            return text
    return gzip.decompress(raw)
