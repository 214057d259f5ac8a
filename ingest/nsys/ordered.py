"""One GPU's rows of an Nsight export as two *sides*, and the order their slices take.

A GPU is two sides: its device work (kernels, copies, fills, graph records:
tracks per stream) and the CPU rows of the processes that launch most on it
(CUDA calls on their thread, NVTX events on their thread or, for start/end
ranges, per process and domain). Each side is one *arm* per activity table:
the table, the SQL filter of the side's rows in it, and the columns a batch
needs of it. Device work comes first, so a CPU row's slice id is the number
of device rows plus its position on its side.

The slice order within a side is (start, track, longest first), then the
activity table and its row id, so that the order is the same on every run:

* device work: ``start``, ``streamId``, ``end`` descending;
* CPU rows: ``start``, the track's kind (``nvtx_async`` before ``thread``),
  the track's key, the end (an NVTX mark or unterminated range ends where it
  starts) descending;

NULL last in each. :func:`cpu_keys` makes the CPU rows' kind, track key and
sort end from the table's columns, one definition for the order
(:mod:`.slice_order`) and for the rows (:mod:`.write`).

Why arms and not one ``union all``: the ADBC driver hands every value over
at ~100 ns, so a union's columns (every table's, NULL where a table has
none: ~25 a row) cost more than SQLite's sort; an arm reads its own table's
columns only. (Skipping the columns an export leaves NULL in every row saved
less than counting them once per export cost: 0.5 against 0.9 CPU s on x60.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .args import args_columns
from .nvtx import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END
from .read import NsysDatabase

_PID = "(((\"{col}\") >> 24) & 16777215)"
#: NVTX event types that become rows (a domain create only names its domain).
NVTX_ROW_TYPES = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END)

#: Columns every device row is read with (its order, track, launch and context).
DEVICE_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId")
#: Columns every CPU row is read with (``eventType`` and ``domainId``: NVTX only).
CPU_COLUMNS = ("start", "end", "globalTid", "correlationId", "eventType", "domainId")
#: Columns each table's names are made from (:func:`.names.source_names`).
NAME_COLUMNS = {"kernel": ("demangledName", "shortName"), "memcpy": ("copyKind", "srcKind",
                                                                      "dstKind"),
                "memset": ("memKind",), "graph": ("graphId",), "runtime": ("nameId",),
                "driver": ("nameId",), "nvtx": ("text", "textId")}
#: The sort keys each side's order reads (:mod:`.slice_order`).
DEVICE_KEYS = ("start", "streamId", "end", "correlationId")
CPU_KEYS = ("start", "end", "globalTid", "eventType", "domainId")


@dataclass(frozen=True)
class Arm:
    """One activity table's rows on a side: ``key`` (:data:`.args.SOURCE_CODE`'s), its
    ``code``, the export's ``table``, the SQL filter ``where`` of the side's rows, the
    ``columns`` a batch has of it (with their Arrow types), and which of them the
    table has (``read``; the others are NULL)."""

    key: str
    code: int
    table: str
    where: str
    columns: tuple[str, ...]
    read: frozenset[str]
    types: tuple[pa.DataType, ...]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema(list(zip(self.columns, self.types)))

    def select(self, columns: Iterable[str]) -> str:
        """SQL of ``rowid`` and those of ``columns`` the export holds, in row id order."""
        read = [f'"{c}"' for c in columns if c in self.read]
        return (f'select {", ".join(["rowid", *read])} from "{self.table}" '
                f"where ({self.where})")


@dataclass(frozen=True)
class Side:
    """The device work (``cpu`` False) or the CPU rows of one GPU: its arms, by code."""

    cpu: bool
    arms: tuple[Arm, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return CPU_KEYS if self.cpu else DEVICE_KEYS


@dataclass(frozen=True)
class Table:
    """One activity table of the export: its key (:data:`.args.SOURCE_CODE`), base name
    and the columns read from it."""

    key: str
    base: str
    columns: tuple[str, ...]


def _arms(db: NsysDatabase, tables: list[tuple[int, Table]], common: tuple[str, ...],
          where: Callable[[Table, set[str]], str], types: dict[str, pa.DataType]
          ) -> tuple[Arm, ...]:
    arms = []
    for code, table in sorted(tables, key=lambda item: item[0]):
        name = db.table(table.base)
        if name is None:
            continue
        present = db.columns(name)
        wanted = [*common, *NAME_COLUMNS[table.key], *args_columns(table.key)]
        columns = tuple(c for c in dict.fromkeys(wanted) if c in table.columns or c in common)
        read = frozenset(c for c in columns if c in present and c in table.columns)
        arms.append(Arm(key=table.key, code=code, table=name, where=where(table, present),
                        columns=columns, read=read,
                        types=tuple(types.get(c, pa.int64()) for c in columns)))
    return tuple(arms)


def gpu_side(db: NsysDatabase, tables: list[tuple[int, Table]], device: int,
             types: dict[str, pa.DataType]) -> Side | None:
    """Device ``device``'s work (``tables``: kernels, copies, fills, graph records)."""
    device = int(device)  # inlined: an int this module's caller read, never text
    arms = _arms(db, tables, DEVICE_COLUMNS,
                 lambda table, present: f'"deviceId" = {device}' if "deviceId" in present
                 else "0", types)
    return Side(cpu=False, arms=arms) if arms else None


def cpu_side(db: NsysDatabase, tables: list[tuple[int, Table]],
             where: Callable[[set[str], bool], str], types: dict[str, pa.DataType]
             ) -> Side | None:
    """The CPU rows ``where(present columns, is NVTX)`` selects (CUDA calls, NVTX events)."""
    arms = _arms(db, tables, CPU_COLUMNS,
                 lambda table, present: where(present, table.key == "nvtx"), types)
    return Side(cpu=True, arms=arms) if arms else None


def cpu_rows_where(pids: list[int], other_pids: list[int] | None
                   ) -> Callable[[set[str], bool], str]:
    """The SQL filter of a GPU's CPU rows: those of ``pids`` (the processes that launch
    most on it) and, for the first GPU (``other_pids``: every process given a GPU), the
    rows of every other process and those without one; NVTX rows of the event types
    that become slices only."""
    def where(present: set[str], nvtx: bool) -> str:
        if "globalTid" not in present:
            return "1" if other_pids is not None else "0"
        pid = _PID.format(col="globalTid")
        mine = f"{pid} in ({', '.join(str(int(p)) for p in pids)})" if pids else "0"
        if other_pids is not None:
            others = ", ".join(str(int(p)) for p in other_pids)
            mine += ' or "globalTid" is null' + (f" or {pid} not in ({others})" if others
                                                  else " or 1")
        if nvtx:
            types = ", ".join(str(t) for t in NVTX_ROW_TYPES)
            mine = (f'({mine}) and "eventType" in ({types})' if "eventType" in present
                    else "0")
        return mine
    return where


@dataclass
class Ints:
    """An integer column as numpy: ``values`` (NULL as 0) and ``valid``."""

    values: np.ndarray
    valid: np.ndarray

    @classmethod
    def of(cls, column: pa.ChunkedArray | pa.Array | None, rows: int) -> Ints:
        if column is None:
            return cls(np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=bool))
        values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64,
                                                                               copy=False)
        valid = (np.ones(rows, dtype=bool) if column.null_count == 0
                 else pc.is_valid(column).to_numpy(zero_copy_only=False))
        return cls(values, valid)

    def array(self) -> pa.Array:
        return pa.array(self.values, pa.int64(), mask=None if self.valid.all() else ~self.valid)


def cpu_keys(nvtx: bool, rows: int, column: Callable[[str], Ints]) -> tuple[Ints, Ints, Ints]:
    """CPU rows' track kind (0: an NVTX start/end range, ``nvtx_async``; 1: a thread's row),
    track key (the thread's ``globalTid``; ``pid << 32 | domain`` of a start/end range)
    and sort end (NVTX: ``coalesce(end, start)``), from the table's columns
    (``column(name)``, NULL where the table has none)."""
    start, end, tid = column("start"), column("end"), column("globalTid")
    if not nvtx:
        return Ints(np.ones(rows, dtype=np.int64), np.ones(rows, dtype=bool)), tid, end
    event = column("eventType")
    ranged = event.valid & (event.values == NVTX_START_END)
    domain = column("domainId")
    pid = (tid.values >> 24) & 16777215
    key = np.where(ranged, (pid << 32) | np.where(domain.valid, domain.values, 0), tid.values)
    sort_end = Ints(np.where(end.valid, end.values, start.values), end.valid | start.valid)
    return (Ints((~ranged).astype(np.int64), np.ones(rows, dtype=bool)),
            Ints(key, tid.valid), sort_end)
