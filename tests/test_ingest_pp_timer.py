"""PP-timer logs (event_times_PP*.json) through the real ingest into ``pp_timer_events``.

Files are written by the real timer module (CPU clock) and in the original
Megatron-LM commit's format (no metadata); bad files must give an
``ingest_errors`` row naming them and land no rows; reloads are incremental.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import duckdb
import pytest

from tracehouse.core.warehouse import Warehouse
from tracehouse.ingest.discover import discover
from tracehouse.ingest.runner import ingest_paths
from tracehouse.megatron_patch.pp_timer import PerfCounterClock, PPTimer, RankInfo

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

ORIGINAL = "event_times_PP2_VPP1_TPxCPxDP_rank_0_pp_rank_1_rank_1.json"


def lake_rows(root: Path, table: str, where: str = "true") -> list[tuple]:
    glob = str(Warehouse(root).table_dir(table) / "**" / "*.parquet")
    with duckdb.connect() as con:
        return con.execute(
            "select * from read_parquet(?, union_by_name = true, hive_partitioning = false) "
            f"where {where}", [glob]).fetchall()


def timer_file(folder: Path, pp_rank: int, rank: int, m: int = 3) -> Path:
    env = {"ENABLE_PP_TIMER": "1", "ENABLE_PP_TIMER_ITER": "4", "PP_TIMER_LOG_DIR": str(folder)}
    timer = PPTimer(PerfCounterClock, env)
    info = RankInfo(global_rank=rank, pp_rank=pp_rank, pp_size=2, vpp_size=1, tp_cp_dp_rank=0,
                    world_size=2)
    assert timer.start_step(4, rank_info=info, barrier=lambda: None)
    for mb in range(m):
        timer.timed(lambda: None, "forward", microbatch=mb)()
    for _mb in range(m):
        timer.timed(lambda: None, "backward")()
    path = timer.finish_step()
    assert path is not None
    return path


@pytest.fixture
def job(tmp_path: Path) -> Path:
    folder = tmp_path / "job" / "pp_timer_logs"
    timer_file(folder, 0, 0)
    (folder / ORIGINAL).write_text(json.dumps({
        "forward-0-start": 0.21, "forward-0-end": 35.8, "forward-1-start": 36.0,
        "forward-1-end": 70.5, "backward-0-start": 71.0, "backward-0-end": 140.2,
        "backward-1-start": 141.0, "backward-1-end": 212.4, "total-execution-time": 220.1}))
    return tmp_path / "job"


def test_discovery_lists_timer_logs_with_the_job_as_run(job: Path) -> None:
    found = discover([job])
    assert sorted((p.name, run) for p, run in found.pp_timers) == [
        ("event_times_PP2_VPP1_TPxCPxDP_rank_0_pp_rank_0_rank_0.json", "job"),
        (ORIGINAL, "job")]
    assert found.traces == [] and found.skipped == []


def test_both_formats_load_and_reload_incrementally(job: Path, tmp_path: Path) -> None:
    root = tmp_path / "wh"
    stream = io.StringIO()
    result = ingest_paths([job], root, progress=False, stream=stream)
    assert result.exit_code == 0, stream.getvalue()
    assert sorted(rows for _p, _r, rows in result.pp_timers) == [4, 6]
    assert "2 PP-timer file(s)" in result.summary()
    (job / "topology.json").write_text(json.dumps({"sizes": {"world": 2, "pp": 2},
                                                   "groups": {"pp": [[0, 1]]}}))
    with_topology = ingest_paths([job], root, progress=False, stream=stream)
    assert with_topology.summary(into="LAKE").startswith("loaded 0 trace(s) (0.0 MB, ")
    assert with_topology.summary(into="LAKE").endswith(
        "1 topology file(s), 0 PP-timer file(s); skipped 2, failed 0 into LAKE")
    ours = lake_rows(root, "pp_timer_events", "rank = 0 and timer_format = 'tracehouse'")
    assert len(ours) == 6
    with duckdb.connect() as con:  # its own connection: the module default may be busy
        original = con.execute(
            "select iteration, rank, pp_rank, vpp_chunk, microbatch, phase, start_ns, end_ns, "
            "dur_ns, total_execution_ns, clock from read_parquet(?) order by phase, microbatch",
            [str(Warehouse(root).table_dir("pp_timer_events") / "run=job" / "*.parquet")],
        ).fetchall()
    original = [row for row in original if row[1] == 1]
    assert original[0] == (None, 1, 1, 0, 0, "backward", 71_000_000, 140_200_000, 69_200_000,
                           220_100_000, None)
    assert {row[0] for row in lake_rows(root, "pp_timer_events", "rank = 0")} == {"job"}

    again = ingest_paths([job], root, progress=False, stream=stream)
    assert again.pp_timers == [] and len(again.skipped) == 3  # 2 logs, topology.json
    changed = job / "pp_timer_logs" / ORIGINAL
    doc = json.loads(changed.read_text())
    doc["forward-1-end"] = 70.75
    changed.write_text(json.dumps(doc))
    os.utime(changed, ns=(1, 1))
    third = ingest_paths([job], root, progress=False, stream=stream)
    assert [rows for _p, _r, rows in third.pp_timers] == [4]
    assert len(lake_rows(root, "pp_timer_events")) == 10
    assert lake_rows(root, "pp_timer_events", "rank = 1 and phase = 'forward' and "
                     "microbatch = 1")[0][12] == 70_750_000  # end_ns replaced, not added


@pytest.mark.parametrize(("content", "reason"), [
    ("{not json", "invalid JSON"),
    ("", "empty"),
    ('{"forward-0-start": 1.0}', "no 'end' time"),
    ('{"forward-0-start": 2.0, "forward-0-end": 1.0}', "ends before it starts"),
    ('{"forward-0-start": "soon", "forward-0-end": 1.0}', "not a number"),
    ('{"forward-1-0-start": 0.0, "forward-1-0-end": 1.0}', "names a model chunk"),
    ('{"total-execution-time": 3.0}', "no forward-/backward-"),
    ('{"forward-0-start": 0.0, "forward-0-end": 1.0, "tracehouse": {"rank": 7}}',
     "tracehouse.rank is 7"),
    ("[1, 2]", "not a JSON object"),
])
def test_bad_files_are_errors_and_land_nothing(job: Path, tmp_path: Path, content: str,
                                                reason: str) -> None:
    bad = job / "pp_timer_logs" / "event_times_PP2_VPP1_TPxCPxDP_rank_1_pp_rank_0_rank_2.json"
    bad.write_text(content)
    root = tmp_path / "wh"
    stream = io.StringIO()
    result = ingest_paths([job], root, progress=False, stream=stream)
    assert result.exit_code == 1 and len(result.failed) == 1
    assert reason in result.failed[0].message and bad.name in result.failed[0].path
    assert bad.name in stream.getvalue()
    errors = lake_rows(root, "ingest_errors")
    assert len(errors) == 1 and errors[0][1].endswith(bad.name) and reason in errors[0][3]
    assert lake_rows(root, "pp_timer_events", "rank = 2") == []
    assert len(lake_rows(root, "pp_timer_events")) == 10  # the good files still land
    # Fixed, it loads and its error row goes away.
    bad.write_text('{"forward-0-start": 0.5, "forward-0-end": 1.5}')
    fixed = ingest_paths([job], root, progress=False, stream=stream)
    assert fixed.exit_code == 0 and lake_rows(root, "ingest_errors") == []
