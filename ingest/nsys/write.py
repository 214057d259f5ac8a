"""Write one Nsight GPU's lake files, the ``slices`` file batch by batch.

The lake writer (:func:`ingest.lake.write_trace_tmp`) takes whole tables;
for an Nsight GPU the ``args`` of its slices would be the largest of them
(JSON text per kernel, call and NVTX range). Here the slice context is
computed on the slices without it (a stand-in for NVTX's event type, see
:func:`ingest.nsys.parse.stand_in_args`), and ``slices`` is written in the
lake writer's row groups (``has_role`` rows first, 256 Ki rows a group),
each group's ``args`` built just before it is written
(:class:`ingest.nsys.args.DeferredArgs`); ``annotation_ranges`` is derived
and written a block of range trees at a time (:mod:`.ranges`). The files
hold the same rows, columns and row groups as the lake writer's; the other
tables go through it unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracehouse.core.warehouse import Warehouse

from .. import lake
from ..schema import LAKE_TABLES, TRACE_TABLES
from ..slice_context import with_context
from .args import DeferredArgs
from .parse import NsysTrace, held_back_columns
from .ranges import write_ranges_tmp
from .take import take_rows

#: Rows per ``slices`` row group, as the lake writer writes them.
ROW_GROUP_ROWS = 256 * 1024


def write_gpu_tmp(warehouse: Warehouse, run_id: str, part: NsysTrace,
                  token: str) -> list[tuple[Path, Path]]:
    """Write every table of one GPU to temporaries; return (tmp, final) in commit order."""
    tables = part.tables
    slices = with_context(tables["slices"], tables["flows"], tables["threads"])
    held_back = functools.partial(held_back_columns, run_id, part.rank, part.trace_id)
    pending = []
    try:
        for table in TRACE_TABLES:
            final = lake.trace_file(warehouse, table, run_id, part.trace_id)
            if table == "slices":
                pending.append((_write_slices(slices, part.args, held_back, final, token),
                                final))
            elif table == "annotation_ranges":
                pending.append((write_ranges_tmp(slices, final, token, held_back), final))
            else:
                pending.append((lake.write_parquet_tmp(
                    tables[table], final, token, lake.ROW_GROUP_FLAGS.get(table)), final))
    except BaseException:
        lake.discard(pending)
        raise
    return pending


def _write_slices(slices: pa.Table, args: DeferredArgs,
                  held_back: Callable[[int], dict[str, pa.Array]], final: Path,
                  token: str) -> Path:
    """``slices`` (:data:`~.parse.HELD_SLICES` with the stand-in ``args``, and their
    context) written with the real ``args`` and the held-back columns, group by group."""
    lake_schema = LAKE_TABLES["slices"]
    narrow = slices.drop_columns(["args"])
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{token}{lake.TMP_SUFFIX}")
    # The lake writer's encodings (its private helper: the files must not differ).
    with pq.ParquetWriter(tmp, lake_schema, compression="zstd",
                          **lake._encoding_options(lake_schema)) as writer:  # noqa: SLF001
        for rows in _row_groups(slices[lake.ROW_GROUP_FLAGS["slices"]]):
            taken = take_rows(narrow, rows)
            columns = {**held_back(rows.size), **dict(zip(taken.column_names, taken.columns)),
                       "args": args.for_rows(rows)}
            group = pa.table([columns[name] for name in lake_schema.names],
                             names=lake_schema.names)
            writer.write_table(group.cast(lake_schema), row_group_size=ROW_GROUP_ROWS)
    return tmp


def _row_groups(flag: pa.ChunkedArray) -> list[np.ndarray]:
    """The rows of each row group: those where ``flag`` holds, then the others (NULL counts
    as false), ROW_GROUP_ROWS at a time and never mixed in one group; as the lake writer
    splits a table (an empty file still gets its schema)."""
    chosen = pc.fill_null(flag, False).to_numpy(zero_copy_only=False).astype(bool)
    parts = [np.flatnonzero(chosen), np.flatnonzero(~chosen)]
    groups = [part[at:at + ROW_GROUP_ROWS] for part in parts
              for at in range(0, part.size, ROW_GROUP_ROWS)]
    return groups
