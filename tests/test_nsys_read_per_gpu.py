"""Each GPU's activity is read from the export on its own, in slice order (ingest/nsys/ordered.py,
slice_order.py, fetch.py).

Why it matters: the loader holds one GPU's input at a time, not the
export's, so an 8-GPU node's export costs about an eighth of its tables.
That is only right if the split loses and duplicates nothing: every
kernel, copy and fill is read with its own device, and every CPU row
(runtime and driver calls, NVTX ranges and marks) with exactly one GPU,
the one its process launches most on (else the first); and each side comes
in slice order (start, then track). Checked on the real exports against
counts SQLite itself gives, without ingesting (fast).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.nsys.args import SOURCE_CODE
from tracehouse.ingest.nsys.fetch import side_batches
from tracehouse.ingest.nsys.nvtx import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END
from tracehouse.ingest.nsys.parse import plan_export
from tracehouse.ingest.nsys.read import NsysDatabase
from tracehouse.ingest.nsys.slice_order import order_side
from tracehouse.ingest.nsys.write import gpu_sides
from tracehouse.ingest.trace_types import TraceFile

NSYS = SHARED_DATA / "nsys"
EXPORTS = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []

pytestmark = pytest.mark.skipif(not EXPORTS, reason=f"shared data missing: {NSYS}")

def _sqlite(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as con:
        return con.execute(sql).fetchall()


def _owners(path: Path) -> tuple[dict[int, int], int]:
    """Each process's GPU (most kernels, copies and fills; ties to the lower), the first GPU."""
    work: Counter[tuple[int, int]] = Counter()
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for device, pid, n in _sqlite(path, f"""
                select deviceId, (globalPid >> 24) & 16777215, count(*)
                from CUPTI_ACTIVITY_KIND_{table} group by 1, 2"""):
            work[(pid, device)] += n
    best: dict[int, tuple[int, int]] = {}
    for (pid, device), n in work.items():
        if pid not in best or (n, -device) > (best[pid][1], -best[pid][0]):
            best[pid] = (device, n)
    return {pid: device for pid, (device, _n) in best.items()}, min(d for _p, d in work)


def _side(db: NsysDatabase, side) -> dict[str, list]:
    """A side's rows (batches of 1,000), as lists, checked to come in slice order."""
    rows: dict[str, list] = {}
    for batch in side_batches(db, order_side(db, side), 1000):
        table = batch.table()
        for name in table.column_names:
            rows.setdefault(name, []).extend(table.column(name).to_pylist())
    starts = rows.get("start", [])
    assert starts == sorted(starts)
    return rows


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.stem)
def test_every_row_is_read_with_exactly_one_gpu(export: Path) -> None:
    source = TraceFile(path=export, run_id="r", layout="nsys", rank_hint=None,
                       iteration_hint=None, size_bytes=1, mtime_ns=0)
    with NsysDatabase(export) as db:
        plan = plan_export(db, source)
        expected_owner, first = _owners(export)
        assert len(plan.devices) >= 2, "the shared exports are 2-GPU captures"
        assert dict(plan.process_device) == {p: d for p, d in expected_owner.items()}
        cpu_rows: Counter[str] = Counter()
        for index, device in enumerate(plan.devices):
            gpu, cpu = (_side(db, side) for side in gpu_sides(db, plan, index))
            (kernels,), = _sqlite(export, "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL "
                                          f"where deviceId = {device}")
            assert gpu["src"].count(SOURCE_CODE["kernel"]) == kernels
            assert set(gpu["deviceId"]) == {device}
            for tid in cpu["globalTid"]:
                pid = None if tid is None else (tid >> 24) & 0xFFFFFF
                assert expected_owner.get(pid, first) == device
            for key in ("runtime", "nvtx"):
                cpu_rows[key] += cpu["src"].count(SOURCE_CODE[key])
    (runtime,), = _sqlite(export, "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME")
    (nvtx,), = _sqlite(export, "select count(*) from NVTX_EVENTS where eventType in "
                               f"({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END})")
    assert cpu_rows == {"runtime": runtime, "nvtx": nvtx}
    assert runtime and nvtx
