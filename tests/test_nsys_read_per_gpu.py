"""Each GPU's activity is read from the export on its own (ingest/nsys/parse.py read_gpu).

Why it matters: the loader holds one GPU's input at a time, not the
export's, so an 8-GPU node's export costs about an eighth of its tables.
That is only right if the split loses and duplicates nothing: every
kernel, copy and fill is read with its own device, and every CPU row
(runtime and driver calls, NVTX ranges and marks) with exactly one GPU,
the one its process launches most on (else the first). Checked on the real
exports against counts SQLite itself gives, without ingesting (fast).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.nsys.parse import (
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_START_END,
    read_gpu,
    read_shared,
)
from tracehouse.ingest.nsys.read import NsysDatabase

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


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.stem)
def test_every_row_is_read_with_exactly_one_gpu(export: Path) -> None:
    with NsysDatabase(export) as db:
        shared = read_shared(db)
        devices = sorted({d for d in shared["gpu_work"].column("device").to_pylist()
                          if d is not None})
        mapped = sorted({p for p in shared["gpu_work"].column("pid").to_pylist()
                         if p is not None})
        expected_owner, first = _owners(export)
        assert len(devices) >= 2, "the shared exports are 2-GPU captures"
        cpu_rows: Counter[str] = Counter()
        for index, device in enumerate(devices):
            pids = [p for p in mapped if expected_owner[p] == device]
            tables = read_gpu(db, device, pids, mapped if index == 0 else None)
            (kernels,), = _sqlite(export, "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL "
                                          f"where deviceId = {device}")
            assert tables["kernel"].num_rows == kernels
            assert set(tables["kernel"].column("deviceId").to_pylist()) == {device}
            for key in ("runtime", "nvtx"):
                for tid in tables[key].column("globalTid").to_pylist():
                    pid = None if tid is None else (tid >> 24) & 0xFFFFFF
                    assert expected_owner.get(pid, first) == device
                cpu_rows[key] += tables[key].num_rows
    (runtime,), = _sqlite(export, "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME")
    (nvtx,), = _sqlite(export, "select count(*) from NVTX_EVENTS where eventType in "
                               f"({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END})")
    assert cpu_rows == {"runtime": runtime, "nvtx": nvtx}
    assert runtime and nvtx
