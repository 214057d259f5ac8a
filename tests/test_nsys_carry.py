"""Nesting carried across batches equals nesting the whole trace (ingest/nsys/carry.py),
and the streamer's Parquet groups and spills keep rows and order (groups.py, spill.py).

Why it matters: the streaming Nsight loader nests a GPU's slices a batch at a
time, carrying each track's open slices into the next batch; a slice whose
parent opened batches earlier must still get that parent, its depth and its
partial-overlap flag. Random tracks of nested, touching, zero-length and
partly overlapping slices, cut into batches of every small size, against
one call of ingest/nesting.py on the whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracehouse.ingest.nesting import nest_slices
from tracehouse.ingest.nsys.carry import OpenSlices
from tracehouse.ingest.nsys.groups import GroupedWriter
from tracehouse.ingest.nsys.spill import Spill

_BATCH = pa.schema([("slice_id", pa.int64()), ("track_id", pa.int64()), ("ts", pa.int64()),
                    ("dur", pa.int64())])
_NESTED = pa.schema([*_BATCH, ("depth", pa.int64()), ("parent_id", pa.int64()),
                     ("is_partial_overlap", pa.bool_())])


def _slices(seed: int, n: int) -> pa.Table:
    """Slices in slice order (start, then track, longest first), as the loader numbers them."""
    rng = np.random.default_rng(seed)
    track = rng.integers(0, 3, n)
    ts = rng.integers(0, 60, n) * 10
    dur = rng.choice([0, 0, 5, 10, 20, 35, 80, 300], n)
    order = np.lexsort((-dur, track, ts))
    return pa.table({"slice_id": np.arange(n, dtype=np.int64), "track_id": track[order],
                     "ts": ts[order], "dur": dur[order]}, schema=_BATCH)


@pytest.mark.parametrize("seed", range(6))
def test_batches_nest_as_the_whole(seed: int) -> None:
    slices = _slices(seed, 400)
    whole = nest_slices(*(slices[c].to_numpy() for c in ("track_id", "ts", "dur")))
    assert whole.partial.any() and (whole.depth > 2).any()  # the case is not trivial
    for size in (1, 2, 3, 7, 64, 400):
        open_slices = OpenSlices(_NESTED)
        parts = []
        for at in range(0, slices.num_rows, size):
            combined, carried = open_slices.nest(slices.slice(at, size))
            parts.append(combined.slice(carried))
        got = pa.concat_tables(parts)
        assert got["slice_id"].to_pylist() == list(range(400))
        parent = whole.parent.tolist()
        assert got["parent_id"].to_pylist() == [p if p >= 0 else None for p in parent], size
        assert got["depth"].to_pylist() == whole.depth.tolist(), size
        assert got["is_partial_overlap"].to_pylist() == whole.partial.tolist(), size


def test_groups_are_full_until_a_part_ends(tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.int64())])
    writer = GroupedWriter(tmp_path / "g.parquet", schema, lambda rows: {}, group_rows=4)
    for lo, hi in ((0, 3), (3, 9), (9, 10)):
        writer.write(pa.table({"x": range(lo, hi)}, schema=schema))
    writer.end_part()  # 10 rows: 4 + 4 + 2, then a new part
    writer.write(pa.table({"x": range(10, 15)}, schema=schema))
    writer.close()
    handle = pq.ParquetFile(tmp_path / "g.parquet")
    sizes = [handle.metadata.row_group(i).num_rows for i in range(handle.num_row_groups)]
    assert sizes == [4, 4, 2, 4, 1] and writer.rows == 15
    assert handle.read()["x"].to_pylist() == list(range(15))


def test_small_files_get_the_small_options(tmp_path: Path) -> None:
    asked = []
    schema = pa.schema([("x", pa.int64())])
    for name, rows in (("few", 3), ("none", 0)):
        writer = GroupedWriter(tmp_path / f"{name}.parquet", schema,
                               lambda n: asked.append(n) or {}, group_rows=4)
        writer.write(pa.table({"x": range(rows)}, schema=schema))
        writer.close(write_empty=True)
        assert pq.read_table(tmp_path / f"{name}.parquet").num_rows == rows
    assert asked == [3, 0]


def test_a_spill_gives_back_its_rows_in_order_and_goes(tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    spill = Spill(tmp_path / "s.arrows", schema)
    assert list(spill.tables()) == []  # nothing written: nothing back, no file
    for lo in range(0, 30, 7):
        spill.write(pa.table({"x": range(lo, lo + 7), "s": [f"r{i}" for i in range(7)]},
                             schema=schema))
    back = pa.concat_tables(spill.tables())
    assert back["x"].to_pylist() == list(range(35)) and spill.rows == 35
    assert not (tmp_path / "s.arrows").exists()
