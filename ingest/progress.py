"""Progress reporting for ingest: a live bar on a terminal, plain lines otherwise.

A terminal gets one self-rewriting line (files, MB, MB/s, ETA); a pipe or a
log file (cron, CI) gets one line per file, which greps and diffs well.
Errors are always printed on their own line, naming the file, the reason
and a hint.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts files and bytes as outcomes arrive and reports them."""

    def __init__(self, total_files: int, total_bytes: int, stream: TextIO | None = None,
                 enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.done_files = 0
        self.done_bytes = 0
        self.started = time.monotonic()

    def advance(self, size_bytes: int, line: str | None = None, error: str | None = None,
                count: bool = True) -> None:
        """One file done (``count=False``: already counted, e.g. when it was parsed
        and held back until its run was decided; only its line is due)."""
        if count:
            self.done_files += 1
            self.done_bytes += size_bytes
        if error is not None:
            self._clear()
            print(error, file=self.stream, flush=True)
        if not self.enabled:
            return
        if self.live:
            self._draw()
        elif line is not None:
            print(f"[{self.done_files}/{self.total_files}] {line}", file=self.stream, flush=True)

    def rate_mb_s(self) -> float:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return self.done_bytes / 1e6 / elapsed

    def _draw(self) -> None:
        rate = self.rate_mb_s()
        remaining = max(self.total_bytes - self.done_bytes, 0) / 1e6
        eta = f"{remaining / rate:5.0f}s" if rate > 0 else "    ?"
        text = (f"\r[ingest] {self.done_files}/{self.total_files} files  "
                f"{self.done_bytes / 1e6:8.1f}/{self.total_bytes / 1e6:.1f} MB  "
                f"{rate:6.1f} MB/s  ETA {eta}")
        self.stream.write(text)
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
