"""Slice nesting across batches: the slices still open at a batch's end are carried into the next.

Why: :func:`ingest.nesting.nest_slices` nests a whole trace with one stack per
track; the streaming loader (:mod:`.stream`) sees a GPU's slices a batch at a
time, in slice order. Within a track, slice order is the nesting's own
(start, longest first), and the nesting's stack after a track's last slice so
far is that slice and its chain of parents (each slice is pushed right above
its parent, and what is popped never comes back). Those rows, put before the
next batch's rows, give the walk the same stack it would have had: each keeps
its parent, depth and end, so every slice of the batch gets the parent, depth
and partial-overlap flag of one walk over the whole trace. The carried rows
are also the ancestors the annotation context and the range lineages walk up
(:mod:`ingest.annotation_context`), so they travel with the batch to those too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..nesting import nest_slices


class OpenSlices:
    """Per track, the slices open after the last batch (rows of ``schema``, which has
    ``slice_id``, ``track_id``, ``ts``, ``dur``, ``depth``, ``parent_id`` and
    ``is_partial_overlap``)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = schema.empty_table()

    def nest(self, batch: pa.Table) -> tuple[pa.Table, int]:
        """The carried rows followed by ``batch`` (which lacks the three nesting columns)
        with those columns filled in, and the number of carried rows before it; the
        carried rows become the slices open after it."""
        carried = self.rows
        columns = ["track_id", "ts", "dur"]
        track, ts, dur = (np.concatenate([_ints(carried[c]), _ints(batch[c])]) for c in columns)
        nested = nest_slices(track, ts, dur)
        ids = np.concatenate([_ints(carried["slice_id"]), _ints(batch["slice_id"])])
        k = carried.num_rows
        parent = nested.parent[k:]
        has_parent = parent >= 0
        batch = (batch.append_column("depth", pa.array(nested.depth[k:]))
                 .append_column("parent_id", pa.array(ids[np.maximum(parent, 0)],
                                                      mask=~has_parent))
                 .append_column("is_partial_overlap", pa.array(nested.partial[k:])))
        combined = pa.concat_tables([carried, batch.select(carried.column_names)])
        self.rows = combined.take(pa.array(_open_rows(track, nested.parent)))
        return combined, k


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _open_rows(track: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Rows (in order) of each track's last slice and its chain of parents."""
    if not track.size:
        return np.empty(0, dtype=np.int64)
    _tracks, from_end = np.unique(track[::-1], return_index=True)
    rows = track.size - 1 - from_end
    chain = [rows]
    while (rows := parent[rows][parent[rows] >= 0]).size:
        chain.append(rows)
    return np.unique(np.concatenate(chain))
