"""The ``args`` column of an Nsight GPU's slices, built batch by batch as the lake file is written.

Why apart from the mapping (:mod:`.parse`): ``args`` is the JSON text of a
slice's source row (a kernel's grid, block and registers; an NVTX range's
domain, payload and ids), most of a slice's bytes. Built for a whole GPU
with the rest of its rows, it was held in DuckDB's sorted result, in the
Arrow table taken from it and in the lake writer's copies at once (6.3 GB
peak on a 713 MB export). The mapping now gives each slice a pointer to its
source row (``src``, ``src_row``) instead, and :class:`DeferredArgs` builds
the text of one write batch at a time, with the same DuckDB expressions, so
the lake holds the same bytes.
"""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .nvtx import NVTX_MARK
from .owned import owned
from .take import take_rows

#: Each activity table's ``args`` (JSON text), as a DuckDB expression over its rows
#: (alias ``s``), and the one name it shows: ``(id column, lookup)``, looked up in
#: Arrow into ``s._looked_up`` (``strings``: id -> value; ``domains``: NVTX domain id
#: -> name), so that the query is a plain projection, which keeps the rows' order
#: (a join would need a sort to restore it: 190 MB more per write group).
ARGS_SQL = {
    "kernel": ("""to_json({
                'short name': s._looked_up, 'grid': [s.gridX, s.gridY, s.gridZ],
                'block': [s.blockX, s.blockY, s.blockZ],
                'registers per thread': s.registersPerThread,
                'shared memory': s.staticSharedMemory + s.dynamicSharedMemory,
                'graph id': s.graphId, 'graph node id': s.graphNodeId,
                'launch type': s.launchType})::varchar""",
               ("shortName", "strings")),
    "memcpy": ("""to_json({'bytes': s.bytes, 'copy kind': s.copyKind,
                          'graph node id': s.graphNodeId})::varchar""", None),
    "memset": ("""to_json({'bytes': s.bytes, 'value': s.value,
                          'graph node id': s.graphNodeId})::varchar""", None),
    "graph": ("to_json({'graph id': s.graphId})::varchar", None),
    "runtime": ("to_json({'return value': s.returnValue, 'api name': s._looked_up})::varchar",
                ("nameId", "strings")),
    "driver": ("to_json({'return value': s.returnValue, 'api name': s._looked_up})::varchar",
               ("nameId", "strings")),
    "nvtx": (f"""to_json({{'domain id': s.domainId, 'domain': s._looked_up,
                      'event type': s.eventType, 'range id': s.rangeId,
                      'category': s.category, 'end thread': s.endGlobalTid,
                      'is unterminated': s."end" is null and s.eventType != {NVTX_MARK},
                      'payload': coalesce(s.uint64Value::varchar, s.int64Value::varchar,
                                          s.doubleValue::varchar, s.uint32Value::varchar,
                                          s.int32Value::varchar, s.floatValue::varchar),
                      'json': s.jsonText}})::varchar""",
             ("domainId", "domains")),
}
#: A small integer per activity table, so each slice row names its source row.
SOURCE_CODE = {key: code for code, key in enumerate(ARGS_SQL)}
_COLUMN_REF = re.compile(r'\bs\.(?:"(\w+)"|(\w+))')


def args_columns(key: str) -> list[str]:
    """The columns of activity table ``key`` that its ``args`` read (:data:`ARGS_SQL`'s
    expression and the id it looks up), in order of first use."""
    expression, lookup = ARGS_SQL[key]
    names = [quoted or plain for quoted, plain in _COLUMN_REF.findall(expression)]
    names += [lookup[0]] if lookup is not None else []
    return [name for name in dict.fromkeys(names) if name != "_looked_up"]
#: The column each registered activity table gains: its row number.
ROW_COLUMN = "_row"


class DeferredArgs:
    """Builds ``args`` for any rows of one GPU from its activity tables.

    ``sources`` are the GPU's activity tables by key (only :func:`args_columns` of
    each are kept); ``lookups`` the name tables the args show
    (``strings``: ``id, value``; ``domains``: ``id, value``); ``src``/``src_row``
    say, per slice, which table and row it came from. Holds them until
    :meth:`close`.
    """

    def __init__(self, sources: dict[str, pa.Table], lookups: dict[str, pa.Table],
                 src: np.ndarray, src_row: np.ndarray) -> None:
        self._con = duckdb.connect()
        # Only the columns the args read, copied: the rest (times, ids, names the mapping
        # used) is freed once the caller drops its tables, which a zero-copy selection
        # would not allow (the driver frees a record batch only with all its columns).
        self._sources = {key: pa.table({name: owned(table[name])
                                        for name in args_columns(key)})
                         for key, table in sources.items()}
        self._lookups = lookups
        self.src = src
        self.src_row = src_row

    def for_rows(self, rows: np.ndarray) -> pa.Array:
        """``args`` of the slices at ``rows`` (positions in the GPU's slices), in that order."""
        src, src_row = self.src[rows], self.src_row[rows]
        parts: list[pa.Array] = []
        positions: list[np.ndarray] = []
        for key, code in SOURCE_CODE.items():
            at = np.flatnonzero(src == code)
            if not at.size:
                continue
            picked = take_rows(self._sources[key], src_row[at])
            expression, lookup = ARGS_SQL[key]
            if lookup is not None:
                picked = picked.append_column("_looked_up", self._look_up(picked[lookup[0]],
                                                                          lookup[1]))
            self._con.register("_batch", picked)
            try:
                parts.append(self._con.sql(f"select {expression} as args from _batch as s")
                             .to_arrow_table().column("args").combine_chunks())
            finally:
                self._con.unregister("_batch")
            positions.append(at)
        if not parts:
            return pa.array([], pa.string())
        # Each source's text in batch order: undo the grouping by source.
        inverse = np.empty(rows.size, dtype=np.int64)
        inverse[np.concatenate(positions)] = np.arange(rows.size, dtype=np.int64)
        return pa.concat_arrays(parts).take(pa.array(inverse))

    def _look_up(self, ids: pa.ChunkedArray, lookup: str) -> pa.ChunkedArray:
        """The ``value`` of each id in lookup table ``lookup`` (NULL: none, as a left join)."""
        table = self._lookups[lookup]
        at = pc.index_in(ids, value_set=table.column("id").combine_chunks())
        return pc.take(table.column("value"), at)

    def close(self) -> None:
        """Drop the GPU's activity tables and the connection that formats them."""
        self._sources = {}
        self._con.close()
