"""ingest.kineto.read.gunzip: the compiled single-member path (ingest/_gunzip.c) and Python's
zlib path give the same text, and every file that is not one clean member falls
through to ``gzip.decompress`` (several members read whole, damage reported).

Why both: the compiled path replaced a second CRC pass over the text; a file it
declines must still be read exactly as before, and an install without a C
compiler takes the Python path.
"""

from __future__ import annotations

import gzip
import zlib

import pytest

from tracehouse.ingest.kineto import read

TEXT = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "ts": %d, "dur": 1}' % i
                                     for i in range(5000)) + b"]}"

compiled = pytest.mark.skipif(read._single_member is None,
                              reason="ingest/_gunzip.c not built (no C compiler or zlib.h)")


@compiled
def test_single_member_reads_one_clean_member_only() -> None:
    one = gzip.compress(TEXT)
    assert read._single_member(one, len(TEXT)) == TEXT
    assert read._single_member(one, len(TEXT) - 1) is None  # a trailer's wrong size
    assert read._single_member(one, len(TEXT) + 1) is None
    assert read._single_member(one + b"\0", len(TEXT)) is None  # a byte after the member
    half = len(TEXT) // 2
    two = gzip.compress(TEXT[:half]) + gzip.compress(TEXT[half:])
    assert read._single_member(two, half) is None  # the first member's own size
    assert read._single_member(one[:-9], len(TEXT)) is None  # truncated
    bad_crc = one[:-8] + bytes([one[-8] ^ 1]) + one[-7:]
    assert read._single_member(bad_crc, len(TEXT)) is None
    assert read._single_member(gzip.compress(b""), 0) is None  # Python's path reads it


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_both_paths_read_and_reject_alike(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "python":
        monkeypatch.setattr(read, "_single_member", None)
    elif read._single_member is None:
        pytest.skip("ingest/_gunzip.c not built (no C compiler or zlib.h)")
    one = gzip.compress(TEXT)
    assert read.gunzip(one) == TEXT
    assert read.gunzip(gzip.compress(b"")) == b""
    half = len(TEXT) // 2
    assert read.gunzip(gzip.compress(TEXT[:half]) + gzip.compress(TEXT[half:])) == TEXT
    with pytest.raises(EOFError):
        read.gunzip(one[:len(one) // 2])
    bad_crc = one[:-8] + bytes([one[-8] ^ 1]) + one[-7:]
    with pytest.raises((gzip.BadGzipFile, zlib.error)):
        read.gunzip(bad_crc)
