"""The ``args`` column of an Nsight GPU's slices, built a read batch at a time.

``args`` is the JSON text of a slice's source row (a kernel's grid, block and
registers; an NVTX range's domain, payload and ids), most of a slice's bytes,
so it is made only for the rows of one batch (:class:`ArgsText`, from the
columns the batch's query read), with DuckDB's ``to_json`` so the text is the
lake's as it always was; the context reads a stand-in that holds only NVTX's
event type (:func:`.parse.stand_in_args`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import duckdb
import pyarrow as pa

from .nvtx import NVTX_MARK

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
class ArgsText:
    """Builds ``args`` for rows of one GPU's activity tables, a batch at a time.

    ``lookups`` are the name lookups the args show (``strings``: ``StringIds``;
    ``domains``: NVTX domain id -> name), each a function from ids to values
    (:class:`.names.StringLookup`). Holds one DuckDB connection until :meth:`close`.
    """

    def __init__(self, lookups: dict[str, Callable[[pa.Array], pa.Array]]) -> None:
        self._con = duckdb.connect()
        self._lookups = lookups

    def __call__(self, key: str, rows: pa.Table) -> pa.Array:
        """``args`` of ``rows`` of activity table ``key`` (its :func:`args_columns` at
        least), in their order."""
        expression, lookup = ARGS_SQL[key]
        picked = rows.select(args_columns(key))
        if lookup is not None:
            picked = picked.append_column("_looked_up",
                                          self._lookups[lookup[1]](picked[lookup[0]]))
        self._con.register("_batch", picked)
        try:
            return (self._con.sql(f"select {expression} as args from _batch as s")
                    .to_arrow_table().column("args").combine_chunks())
        finally:
            self._con.unregister("_batch")

    def close(self) -> None:
        self._con.close()
