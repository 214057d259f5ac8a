"""Write one Nsight GPU's ``annotation_ranges`` file a block of whole range trees at a time.

Why: the lake writer derives a trace's ranges in one table
(:func:`ingest.annotation_context.annotation_ranges`: each range's lineage
and its path of names), and on a 713 MB export a GPU has 2.8 M NVTX
ranges: that table was +0.9 GiB on top of the GPU's slices, the largest
step of the load. A range's lineage and path need only its own tree (its
top range and everything under it), so the slices are cut between trees
into blocks of about a row group's ranges, each block's ranges derived by
the same function and written, and dropped. The file holds the same rows
in the same order, in the lake writer's row groups (full groups of
:data:`ROW_GROUP_ROWS`, then the rest), compression and encodings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import lake
from ..annotation_context import ANNOTATION_RANGES, annotation_ranges

#: Rows per row group, as the lake writer writes every table.
ROW_GROUP_ROWS = 256 * 1024


def write_ranges_tmp(slices: pa.Table, final: Path, token: str,
                     held_back: Callable[[int], dict[str, pa.Array]]) -> Path:
    """The ``annotation_ranges`` of ``slices`` (one GPU, with their context) written to a
    temporary beside ``final``; returns its path. ``held_back(n)`` gives the columns the
    slices are held without (:func:`~.parse.held_back_columns`) for a block of n."""
    range_rows = np.flatnonzero(pc.is_valid(slices["annotation_kind"])
                                .to_numpy(zero_copy_only=False))
    roots = _roots(slices, range_rows)
    tmp = final.with_name(f".{final.name}.{token}{lake.TMP_SUFFIX}")
    final.parent.mkdir(parents=True, exist_ok=True)
    options = {"compression": "zstd" if range_rows.size >= lake.COMPRESS_FROM_ROWS else "none",
               # The lake writer's encodings (its private helper: the files must not differ).
               **lake._encoding_options(ANNOTATION_RANGES)}  # noqa: SLF001
    with pq.ParquetWriter(tmp, ANNOTATION_RANGES, **options) as writer:
        held: list[pa.Table] = []  # derived, not yet written: under a row group's rows
        written = 0
        for lo, hi in tree_blocks(roots, ROW_GROUP_ROWS):
            first, last = int(range_rows[lo]), int(range_rows[hi - 1])
            block = slices.slice(first, last - first + 1)
            for name, column in held_back(block.num_rows).items():
                if name in ANNOTATION_RANGES.names and name not in block.column_names:
                    block = block.append_column(name, column)
            held.append(annotation_ranges(block))
            pending = pa.concat_tables(held)
            full = pending.num_rows - pending.num_rows % ROW_GROUP_ROWS
            if full:
                writer.write_table(pending.slice(0, full), row_group_size=ROW_GROUP_ROWS)
                written += full
            held = [pending.slice(full)]
        rest = pa.concat_tables(held) if held else ANNOTATION_RANGES.empty_table()
        if rest.num_rows or not written:  # an empty file still gets what the lake writer writes
            writer.write_table(rest, row_group_size=ROW_GROUP_ROWS)
    return tmp


def _roots(slices: pa.Table, range_rows: np.ndarray) -> np.ndarray:
    """Per range (in row order), the position among the ranges of its top range: the
    last one up its chain of ``annotation_slice_id`` parents found among the ranges."""
    ids = slices["slice_id"].take(pa.array(range_rows)).to_numpy(zero_copy_only=False)
    parents = pc.fill_null(slices["annotation_slice_id"].take(pa.array(range_rows)), -1)
    parents = parents.to_numpy(zero_copy_only=False).astype(np.int64)
    parent = np.full(ids.size, -1, dtype=np.int64)
    if ids.size:
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], parents), ids.size - 1)
        hit = (parents >= 0) & (ids[order][at] == parents)
        parent[hit] = order[at][hit]
    root = np.arange(ids.size, dtype=np.int64)
    up = parent.copy()
    while (alive := up >= 0).any():  # one step up per round, every range at once
        root[alive] = up[alive]
        up[alive] = parent[up[alive]]
    return root


def tree_blocks(roots: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` blocks of ranges, each about ``size`` long (longer only
    where a tree is), cut only where no tree spans the cut: every range before it has
    its root before it, every range after it its root after it."""
    n = roots.size
    if not n:
        return []
    index = np.arange(n)
    before = np.maximum.accumulate(roots) < index + 1  # ranges 0..k-1 rooted before k
    after = np.minimum.accumulate(roots[::-1])[::-1] >= index  # ranges k.. rooted from k
    cuts = np.concatenate((index[1:][before[:-1] & after[1:]], [n]))
    blocks, lo = [], 0
    while lo < n:
        at = np.searchsorted(cuts, lo + size, side="right") - 1
        hi = int(cuts[at]) if at >= 0 and cuts[at] > lo else int(
            cuts[np.searchsorted(cuts, lo, side="right")])
        blocks.append((lo, hi))
        lo = hi
    return blocks
