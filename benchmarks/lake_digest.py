#!/usr/bin/env python3
"""Digest of every lake table and column after ingesting some traces: a check that
a change to ingest leaves the lake's content as it was.

Why a digest and not the Parquet bytes: row groups, encodings and the ingest
time may change while the rows do not. Each table's files are read in a fixed
order (by trace id), volatile columns (``ingested_at``) are left out, and each
column's values, in row order, are hashed as Python values; the output is one
line per (table, column), so two runs compare with ``diff``.

    python benchmarks/lake_digest.py OUT.txt PATH [PATH ...]   # one set per PATH

Each PATH is ingested into its own fresh warehouse (in a temporary folder),
in one process (``jobs=1``), the way ``tracehouse ingest PATH`` loads it.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

#: Columns that differ between two loads of the same bytes.
VOLATILE = frozenset({"ingested_at"})


def table_digests(lake: Path) -> dict[tuple[str, str], str]:
    """``{(table, column): digest}`` of every table under ``lake``."""
    import pyarrow.parquet as pq

    out: dict[tuple[str, str], str] = {}
    for folder in sorted(p for p in lake.iterdir() if p.is_dir()):
        files = sorted(folder.glob("run=*/*.parquet"))
        tables = [pq.read_table(f) for f in files]
        out[(folder.name, "#rows")] = str(sum(t.num_rows for t in tables))
        if not tables:
            continue
        for column in tables[0].column_names:
            if column in VOLATILE:
                continue
            h = hashlib.blake2b(digest_size=12)
            for t in tables:
                h.update(repr(t[column].type).encode())
                # The whole column's values at once: one chunk per row group, so
                # hashing chunk by chunk changed the digest with the row groups.
                h.update(repr(t[column].to_pylist()).encode())
            out[(folder.name, column)] = h.hexdigest()
    return out


def digest_set(path: Path) -> dict[tuple[str, str], str]:
    from tracehouse.ingest.runner import ingest_paths

    with tempfile.TemporaryDirectory(prefix="lake-digest-") as tmp:
        result = ingest_paths([path], Path(tmp), jobs=1, progress=False)
        if result.failed:
            raise SystemExit(f"{path}: {[f.line() for f in result.failed]}")
        return table_digests(Path(tmp) / "lake")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    lines = []
    for path in argv[1:]:
        for (table, column), digest in digest_set(Path(path)).items():
            lines.append(f"{path}\t{table}\t{column}\t{digest}")
    Path(argv[0]).write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} digests -> {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
