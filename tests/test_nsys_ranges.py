"""An Nsight GPU's ``annotation_ranges`` file written a block of range trees at a time
(ingest/nsys/ranges.py).

Why it matters: a range's lineage and path are derived from its tree, so a
block that cut a tree in two would give the ranges below the cut a
different lineage, path and parent; and the file must hold what the lake
writer would have written (same rows, order and row groups).
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.annotation_context import annotation_ranges
from tracehouse.ingest.nsys import ranges
from tracehouse.ingest.nsys.parse import held_back_columns, parse_gpu, plan_export
from tracehouse.ingest.nsys.read import NsysDatabase
from tracehouse.ingest.slice_context import with_context
from tracehouse.ingest.trace_types import TraceFile

EXPORT = SHARED_DATA / "nsys" / "mfu_2gpu_before.sqlite"


def test_blocks_cover_every_range_and_never_cut_a_tree() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 40, size=300)  # trees of 1..39 ranges, one after another
    roots = np.repeat(np.cumsum(np.r_[0, sizes[:-1]]), sizes)
    roots[500:520] = 480  # one tree interleaved with its neighbours: never cut inside
    blocks = ranges.tree_blocks(roots, 100)
    assert blocks[0][0] == 0 and blocks[-1][1] == roots.size
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    for lo, hi in blocks:
        assert roots[lo:hi].min() >= lo and roots[lo:hi].max() < hi
    assert max(hi - lo for lo, hi in blocks) < 100 + 40 + 40
    assert ranges.tree_blocks(np.zeros(0, dtype=np.int64), 100) == []
    assert ranges.tree_blocks(np.zeros(7, dtype=np.int64), 2) == [(0, 7)]  # one tree: one block


@pytest.mark.skipif(not EXPORT.is_file(), reason=f"shared data missing: {EXPORT}")
def test_file_equals_the_lake_writers_ranges(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A real GPU's ranges, in blocks of ~200: the same rows as derived at once, in full
    row groups of the (lowered) group size, then the rest."""
    source = TraceFile(path=EXPORT, run_id="r", rank_hint=None, iteration_hint=None,
                       layout="nsys", size_bytes=EXPORT.stat().st_size, mtime_ns=0)
    with NsysDatabase(EXPORT) as db:
        plan = plan_export(db, source)
        part = parse_gpu(db, plan, 0, source, trace_id="t", content_hash="h",
                         ingested_at=dt.datetime.now(dt.timezone.utc))
    part.args.close()
    tables = part.tables
    slices = with_context(tables["slices"], tables["flows"], tables["threads"])
    held_back = functools.partial(held_back_columns, "r", part.rank, "t")
    whole = slices
    for name, column in held_back(slices.num_rows).items():
        whole = whole.append_column(name, column)
    expected = annotation_ranges(whole)
    assert expected.num_rows > 1000
    monkeypatch.setattr(ranges, "ROW_GROUP_ROWS", 200)
    path = ranges.write_ranges_tmp(slices, tmp_path / "ranges.parquet", "tok", held_back)
    written = pq.read_table(path)
    assert written.equals(expected)
    groups = [pq.ParquetFile(path).metadata.row_group(i).num_rows
              for i in range(pq.ParquetFile(path).num_row_groups)]
    assert groups[:-1] == [200] * (len(groups) - 1) and 0 < groups[-1] <= 200
