#!/usr/bin/env python3
"""Digest of the lake rows that ingest writes for Nsight exports: to prove a change kept them.

Why: the Nsight loader may be rewritten for speed or memory, but every
model reads its lake tables, so a rewrite must leave them identical. This
ingests each export into a fresh warehouse and prints one digest per lake
file and column (schema included, ``ingested_at`` left out: it is the
clock), in row order. Run it on two checkouts and diff the output:

    python benchmarks/nsys_lake_digest.py [FILE ...] > before.txt   # old code
    python benchmarks/nsys_lake_digest.py [FILE ...] > after.txt    # new code
    diff before.txt after.txt
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
NSYS = REPO.parent / "shared" / "data" / "nsys"
DEFAULT_FILES = [NSYS / "mfu_2gpu_before.sqlite", NSYS / "h100_2gpu_1s.sqlite"]
#: Columns that differ between two loads of the same bytes by design.
VOLATILE = frozenset({"ingested_at"})


def lake_digest(file: Path) -> list[str]:
    """``file`` ingested into a fresh warehouse: one line per lake file and column."""
    sys.path.insert(0, str(REPO))
    from tracehouse.ingest.runner import ingest_paths

    lines = []
    with tempfile.TemporaryDirectory(prefix="nsys-digest-") as tmp:
        result = ingest_paths([file], warehouse=Path(tmp), run="digest", jobs=1,
                              progress=False)
        if result.failed:
            raise SystemExit(f"{file}: ingest failed: {result.failed}")
        lake = Path(tmp) / "lake"
        for part in sorted(lake.glob("*/run=*/*.parquet")):
            table = pq.read_table(part)
            name = part.relative_to(lake)
            lines.append(f"{file.name} {name} rows={table.num_rows}")
            for field in table.schema:
                if field.name in VOLATILE:
                    continue
                digest = hashlib.blake2b(digest_size=12)
                for value in table.column(field.name).to_pylist():
                    digest.update(repr(value).encode())
                lines.append(f"{file.name} {name} {field.name}:{field.type} "
                             f"{digest.hexdigest()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for file in [Path(a) for a in argv] or DEFAULT_FILES:
        print("\n".join(lake_digest(file)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
