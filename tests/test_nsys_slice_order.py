"""A side's slice order from its keys and its rows read by row id ranges equal SQLite's own
``order by`` of the side's rows (ingest/nsys/slice_order.py, fetch.py).

Why it matters: the row order is part of the lake (slice ids, nesting, the
Parquet rows). The loader once let SQLite sort the union of a side's tables;
now numpy sorts the keys and each batch is read back by row id ranges. A
small export made here has what the real ones rarely show at once: rows out
of time order in their tables (row id order is not time order), many ties on
start, stream, kind and track, NULL streams, ends and thread ids, NVTX
start/end ranges, marks and unterminated ranges, and rows of another GPU and
process in between. Both sides must come back row for row as SQLite orders
them, for batches of 1, 7 and many rows and with ranges cut at every gap, at
gaps of more than 2 rows, or never, and each track's count must equal SQLite's.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from tracehouse.ingest.nsys import fetch
from tracehouse.ingest.nsys.fetch import side_batches
from tracehouse.ingest.nsys.nvtx import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END
from tracehouse.ingest.nsys.ordered import cpu_rows_where, cpu_side, gpu_side
from tracehouse.ingest.nsys.parse import COLUMN_TYPES
from tracehouse.ingest.nsys.read import NsysDatabase
from tracehouse.ingest.nsys.slice_order import order_side
from tracehouse.ingest.nsys.write import CPU_SOURCES, GPU_SOURCES, _tables

PID, OTHER_PID = 7, 8
TID = (PID << 24) | 101
_PID_SQL = '((("globalTid") >> 24) & 16777215)'


def _export(path: Path, seed: int = 3) -> Path:
    """A tiny export: kernels and copies on devices 0 and 1, runtime calls and NVTX events
    of two processes, every table filled in a shuffled (not time) order."""
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.executescript("""
        create table StringIds (id integer primary key, value text);
        create table CUPTI_ACTIVITY_KIND_KERNEL (start integer, "end" integer, deviceId integer,
            streamId integer, correlationId integer, globalPid integer, demangledName integer,
            shortName integer, gridX integer);
        create table CUPTI_ACTIVITY_KIND_MEMCPY (start integer, "end" integer, deviceId integer,
            streamId integer, correlationId integer, bytes integer, copyKind integer);
        create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer, "end" integer,
            globalTid integer, correlationId integer, nameId integer, returnValue integer);
        create table NVTX_EVENTS (start integer, "end" integer, eventType integer,
            text text, globalTid integer, domainId integer, textId integer, jsonText text);
    """)
    con.executemany("insert into StringIds values (?, ?)",
                    [(i, f"name{i}") for i in range(1, 6)])
    maybe = lambda value, p=0.15: None if rng.random() < p else value  # noqa: E731

    def times() -> tuple[int, int | None]:
        start = rng.randrange(0, 40)
        return start, maybe(start + rng.randrange(0, 6))

    kernels = [(*times(), rng.choice([0, 1]), maybe(rng.choice([3, 4])), rng.randrange(50),
                PID << 24, rng.randrange(1, 6), rng.randrange(1, 6), rng.randrange(4))
               for _ in range(300)]
    copies = [(*times(), rng.choice([0, 1]), maybe(rng.choice([3, 5])), rng.randrange(50),
               rng.randrange(1000), rng.randrange(3)) for _ in range(80)]
    tids = [TID, TID + 1, (OTHER_PID << 24) | 5, None]
    calls = [(*times(), maybe(rng.choice(tids[:3]), 0.05), rng.randrange(50),
              rng.randrange(1, 6), 0) for _ in range(250)]
    events = []
    for _ in range(300):
        start, end = times()
        kind = rng.choice([NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_START_END])
        events.append((start, None if kind == NVTX_MARK else end, kind,
                       maybe(f"range{rng.randrange(4)}", 0.3), rng.choice(tids),
                       maybe(rng.choice([0, 1, 2])), rng.randrange(1, 6), None))
    for table, rows in (("CUPTI_ACTIVITY_KIND_KERNEL", kernels),
                        ("CUPTI_ACTIVITY_KIND_MEMCPY", copies),
                        ("CUPTI_ACTIVITY_KIND_RUNTIME", calls), ("NVTX_EVENTS", events)):
        rng.shuffle(rows)
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"insert into {table} values ({marks})", rows)
    con.commit()
    con.close()
    return path


def _union(arms: list[tuple[int, str, str, str]], columns: list[str], order: str) -> str:
    """The side's rows as the loader once had SQLite sort them: ``arms`` are
    ``(code, table, extra select, where)``."""
    return " union all ".join(
        f"select {code} as src, rowid as _row, {', '.join(columns)}{extra} from {table} "
        f"where {where}" for code, table, extra, where in arms) + f" order by {order}"


def _expected_gpu(path: Path, device: int) -> list[tuple]:
    columns = ["start", '"end"', "deviceId", "streamId", "correlationId"]
    sql = _union([(0, "CUPTI_ACTIVITY_KIND_KERNEL", "", f"deviceId = {device}"),
                  (1, "CUPTI_ACTIVITY_KIND_MEMCPY", "", f"deviceId = {device}")], columns,
                 'start nulls last, streamId nulls last, "end" desc nulls last, src, _row')
    with sqlite3.connect(path) as con:
        return [row[:1] + row[2:] for row in con.execute(sql)]


def _expected_cpu(path: Path, where: str, nvtx_where: str) -> tuple[list[tuple], list[tuple]]:
    columns = ["start", '"end"', "globalTid", "eventType", "domainId"]
    runtime = ("start", '"end"', "globalTid", "null", "null")
    extra = ", sort_end, kind, track_key"
    key = (f"case when eventType = {NVTX_START_END} then ({_PID_SQL} << 32) | "
           "coalesce(domainId, 0) else globalTid end")
    arms = [(4, f"(select rowid, {', '.join(f'{c} as {n}' for c, n in zip(runtime, columns))},"
                ' "end" as sort_end, 1 as kind, globalTid as track_key '
                "from CUPTI_ACTIVITY_KIND_RUNTIME)", extra, where),
            (6, f'(select rowid, {", ".join(columns)}, coalesce("end", start) as sort_end, '
                f"case when eventType = {NVTX_START_END} then 0 else 1 end as kind, "
                f"{key} as track_key from NVTX_EVENTS)", extra, nvtx_where)]
    sql = _union(arms, columns, "start nulls last, kind, track_key nulls last, "
                 "sort_end desc nulls last, src, _row")
    with sqlite3.connect(path) as con:
        rows = [row[:1] + row[2:7] for row in con.execute(sql)]
        tracks = con.execute(
            f"select kind, track_key, count(*) from ({sql.split(' order by ')[0]}) "
            "group by 1, 2 order by kind, track_key is null, track_key").fetchall()
    return rows, tracks


def _sides(path: Path, device: int, pids: list[int], others: list[int] | None):
    with NsysDatabase(path) as db:
        gpu = gpu_side(db, _tables(GPU_SOURCES), device, COLUMN_TYPES)
        cpu = cpu_side(db, _tables(CPU_SOURCES), cpu_rows_where(pids, others), COLUMN_TYPES)
        return gpu, cpu


def _read(path: Path, side, names: list[str], batch_rows: int) -> tuple[list[tuple], object]:
    with NsysDatabase(path) as db:
        order = order_side(db, side)
        rows = []
        for batch in side_batches(db, order, batch_rows):
            table = batch.table()
            rows += list(zip(*(table[name].to_pylist() if name in table.column_names
                               else [None] * table.num_rows for name in names)))
    return rows, order


@pytest.mark.parametrize(("batch_rows", "gap_rows"), [(1, 0), (7, 2), (1000, 10**6)])
def test_sides_come_in_sqlite_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    batch_rows: int, gap_rows: int) -> None:
    monkeypatch.setattr(fetch, "GAP_ROWS", gap_rows)
    path = _export(tmp_path / "tiny.sqlite")
    for device in (0, 1):
        gpu, _cpu = _sides(path, device, [PID], None)
        rows, order = _read(path, gpu, ["src", "start", "end", "deviceId", "streamId",
                                        "correlationId"], batch_rows)
        expected = _expected_gpu(path, device)
        assert rows == expected and len(rows) > 100
        counts: dict = {}
        for row in expected:
            counts[row[4]] = counts.get(row[4], 0) + 1
        assert order.tracks == sorted(counts.items(),
                                      key=lambda kv: (kv[0] is None, kv[0] or 0))
    nvtx_types = f"eventType in ({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END})"
    for pids, others, where in (
            ([PID], [PID], f"{_PID_SQL} in ({PID}) or globalTid is null or "
                           f"{_PID_SQL} not in ({PID})"),
            ([OTHER_PID], None, f"{_PID_SQL} in ({OTHER_PID})")):
        _gpu, cpu = _sides(path, 0, pids, others)
        rows, order = _read(path, cpu, ["src", "start", "end", "globalTid", "eventType",
                                        "domainId"], batch_rows)
        expected, tracks = _expected_cpu(path, where, f"({where}) and {nvtx_types}")
        assert rows == expected and len(rows) > 50
        assert order.tracks == tracks
