"""The time-axis chart families (timeline, microbatch, pipeline, replica) on real warehouses.

The session's reference warehouse (conftest: ingested and built the way a
user builds one, once, shared read-only) holds, among other runs, a simulated
TP2 x PP2 x DP2 interleaved run (VPP 2, with its PP-timer logs), a simulated
plain 1F1B PP2 run, the real 8-GPU DLRM traces and the real CPU-only
megatron-core TP1 x PP4 x DP2 traces. Each family renders each run into a temporary
folder; the tests check that every PNG is a real, non-blank image and every
SVG parses, that runs without pipelines yield no pipeline charts, that the
bubble figures in the titles are the marts' numbers, and that the
scale-down choices (representative ranks, first and slowest groups) hold at
1,024 ranks.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from matplotlib import image as mpimg

from conftest import ReferenceWarehouse
from tracehouse.reports import microbatch, pipeline, replica, timeline
from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart
from tracehouse.reports.style import KIND_COLORS, PHASE_COLORS

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

SIM_RUN = "sim_tp2_pp2_dp2_vpp2"
SIM_1F1B_RUN = "sim_tp1_pp2_1f1b"
DLRM_RUN = "dlrm_8rank"
CPU_RUN = "tp1_pp4_dp2"
FAMILIES = {"timeline": timeline, "microbatch": microbatch, "pipeline": pipeline,
            "replica": replica}

#: What each family must draw per run: slugs expected (exact set) or [] for nothing.
EXPECTED_SLUGS: dict[tuple[str, str], set[str] | None] = {
    ("timeline", SIM_RUN): {"timeline_kernels"},
    ("timeline", DLRM_RUN): {"timeline_kernels"},
    ("timeline", CPU_RUN): {"timeline_cpu_steps"},
    ("microbatch", SIM_RUN): {"microbatch_gpu"},
    ("microbatch", DLRM_RUN): {"microbatch_gpu"},
    ("microbatch", CPU_RUN): {"microbatch_cpu"},
    ("pipeline", SIM_RUN): None,  # 4 groups: the first plus up to two picked (see below)
    ("pipeline", DLRM_RUN): set(),  # no pipeline topology: nothing to draw
    ("pipeline", CPU_RUN): {"pipeline_cpu_group0", "pipeline_cpu_group1"},
    ("replica", SIM_RUN): {"replica_0", "replica_1"},
    ("replica", DLRM_RUN): set(),
    ("replica", CPU_RUN): {"replica_0", "replica_1"},
}


@pytest.fixture(scope="module")
def warehouse(reference_warehouse: ReferenceWarehouse) -> Path:
    """The session's reference warehouse (conftest): the simulated runs and the two real
    ones, among others, ingested and built once."""
    return reference_warehouse.root


@pytest.fixture(scope="module")
def con(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """Read-only connection on the module's warehouse, as the report opens it."""
    connection = duckdb.connect(str(warehouse / "tracehouse.duckdb"), read_only=True)
    yield connection
    connection.close()


def _render(con: duckdb.DuckDBPyConnection, family: str, run_id: str,
            out: Path) -> list[RenderedChart]:
    return FAMILIES[family].FAMILY.render(ChartContext(con=con, run_id=run_id, out_dir=out))


def _check_image(chart: RenderedChart) -> None:
    """A real PNG of non-trivial size with many colours (not blank), and a parseable SVG."""
    assert chart.png.is_file() and chart.svg.is_file()
    assert chart.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chart.png.stat().st_size > 15_000, chart.png
    pixels = mpimg.imread(chart.png)
    assert pixels.shape[0] > 150 and pixels.shape[1] > 600
    colours = np.unique((pixels[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 30, f"{chart.png} looks blank ({len(colours)} colours)"
    # Mostly not background: at least 2% of the pixels differ from white.
    assert (pixels[..., :3] < 0.97).any(axis=-1).mean() > 0.02
    root = ET.parse(chart.svg).getroot()
    assert root.tag.endswith("svg")
    assert chart.title and chart.caption


@pytest.mark.parametrize(("family", "run_id"), sorted(EXPECTED_SLUGS))
def test_family_renders_run(con: duckdb.DuckDBPyConnection, tmp_path: Path, family: str,
                            run_id: str) -> None:
    charts = _render(con, family, run_id, tmp_path)
    expected = EXPECTED_SLUGS[(family, run_id)]
    if expected is None:  # the simulated run's 4 PP groups: group 0 and at most two others
        expected = {chart.slug for chart in charts}
        assert {"pipeline_gpu_group0", "pipeline_pp_timer"} <= expected
        assert 3 <= len(expected) <= 4
    assert {chart.slug for chart in charts} == expected
    for chart in charts:
        assert chart.slug.startswith(family)
        _check_image(chart)
    assert {path.stem for path in tmp_path.glob("*.png")} == expected
    assert not list(tmp_path.glob(".*")), "temporary files left behind"


def _bubble(con: duckdb.DuckDBPyConnection, run_id: str, group: int) -> tuple[float, float]:
    """(measured idle share, theoretical bubble) of a group's last iteration, from the mart."""
    row = con.execute(
        """
        select sum(bubble_ns) / sum(group_span_ns), any_value(theoretical_bubble_ratio)
        from fct_pipeline_bubbles
        where run_id = ? and pp_group_index = ?
            and iteration = (select max(iteration) from fct_pipeline_bubbles where run_id = ?)
        """, [run_id, group, run_id]).fetchone()
    return float(row[0]), float(row[1])


def test_pipeline_titles_carry_the_marts_bubble_figures(con: duckdb.DuckDBPyConnection,
                                                        tmp_path: Path) -> None:
    charts = {chart.slug: chart for chart in _render(con, "pipeline", SIM_RUN, tmp_path / "s")}
    gpu = charts["pipeline_gpu_group0"]
    idle, theory = _bubble(con, SIM_RUN, 0)
    assert theory == pytest.approx(1 / 9)  # p = 2, v = 2, m = 4
    assert "interleaved 1F1B (v=2)" in gpu.title
    assert f"idle {idle:.1%}" in gpu.title
    assert "(p−1)/(v·m+p−1) = 1/(2·4+1) = 11.1%" in gpu.title
    assert "microbatch.chunk" in gpu.caption
    timer = charts["pipeline_pp_timer"]
    assert timer.title.startswith("PP timer · iteration 1 · interleaved 1F1B (v=2)")
    assert "= 11.1%" in timer.title

    plain = {chart.slug: chart
             for chart in _render(con, "pipeline", SIM_1F1B_RUN, tmp_path / "p")}
    assert set(plain) == {"pipeline_gpu_group0", "pipeline_pp_timer"}
    idle, theory = _bubble(con, SIM_1F1B_RUN, 0)
    assert theory == pytest.approx(1 / 5)  # p = 2, m = 4
    title = plain["pipeline_gpu_group0"].title
    assert "· 1F1B ·" in title and f"idle {idle:.1%}" in title
    assert "(p−1)/(m+p−1) = 1/(4+1) = 20.0%" in title
    assert "microbatch.chunk" not in plain["pipeline_gpu_group0"].caption
    for chart in plain.values():
        _check_image(chart)

    cpu = {chart.slug: chart for chart in _render(con, "pipeline", CPU_RUN, tmp_path / "c")}
    idle, theory = _bubble(con, CPU_RUN, 1)
    title = cpu["pipeline_cpu_group1"].title
    assert "· 1F1B ·" in title and "CPU" in cpu["pipeline_cpu_group1"].caption
    assert f"idle {idle:.1%}" in title
    assert f"(p−1)/(m+p−1) = 3/(8+3) = {theory:.1%}" in title and theory == pytest.approx(3 / 11)


@pytest.mark.parametrize("run_id", [SIM_RUN, SIM_1F1B_RUN, CPU_RUN])
def test_replica_and_pipeline_name_the_same_schedule(con: duckdb.DuckDBPyConnection,
                                                     tmp_path: Path, run_id: str) -> None:
    """The replica chart used to say "1F1B or interleaved (v not in the warehouse)"."""
    names = [pipeline.schedule_name(v) for v in (None, 1, 2, 3, 4)]

    def schedules(family: str) -> set[str]:
        found = set()
        for chart in _render(con, family, run_id, tmp_path / family):
            found |= {name for name in names if f"· {name}" in chart.title}
        return found

    on_pipeline = schedules("pipeline")
    assert len(on_pipeline) == 1 and "not in the warehouse" not in next(iter(on_pipeline))
    assert schedules("replica") == on_pipeline


def test_pipeline_renders_without_bubble_mart(warehouse: Path, tmp_path: Path) -> None:
    """A warehouse built before fct_pipeline_bubbles existed: no measured figure, still a chart."""
    copy = tmp_path / "old.duckdb"
    shutil.copy(warehouse / "tracehouse.duckdb", copy)
    writable = duckdb.connect(str(copy))
    try:
        writable.execute("drop table fct_pipeline_bubbles")
        writable.execute("drop table fct_pp_timer_events")
        charts = pipeline.FAMILY.render(
            ChartContext(con=writable, run_id=CPU_RUN, out_dir=tmp_path / "out"))
    finally:
        writable.close()
    assert {chart.slug for chart in charts} == {"pipeline_cpu_group0", "pipeline_cpu_group1"}
    for chart in charts:
        _check_image(chart)
        assert "idle" not in chart.title.split("·", 3)[-1].split("theoretical")[0]
        assert "3/(8+3) = 27.3%" in chart.title
        assert "measured idle share omitted" in chart.caption


def test_timeline_islands_add_up_to_the_marts_union(con: duckdb.DuckDBPyConnection,
                                                   tmp_path: Path) -> None:
    """With no gap tolerance, the drawn islands cover exactly the union the mart reports."""
    ctx = ChartContext(con=con, run_id=SIM_RUN, out_dir=tmp_path)
    expected = con.execute(
        "select rank, compute_ns, communication_ns, memory_ns from fct_rank_iterations"
        " where run_id = ? and iteration = 1 order by rank", [SIM_RUN]).df()
    islands = timeline.merged_intervals(ctx, 1, [int(rank) for rank in expected["rank"]], 0)
    islands["length"] = islands["end_ns"] - islands["start_ns"]
    got = islands.pivot_table(index="rank", columns="kind", values="length", aggfunc="sum")
    for kind in ("compute", "communication", "memory"):
        assert got[kind].fillna(0).astype("int64").tolist() == (
            expected[f"{kind}_ns"].astype("int64").tolist())
    # A tolerance closes gaps, never opens them, and bounds the bars drawn per
    # lane: islands are separated by more than span / N, so at most N + 1 per
    # rank x kind however many kernels there are (the chart uses N = 4000).
    span = con.execute("select max(end_ns) - min(ts_ns) from fct_kernels"
                       " where run_id = ? and iteration = 1", [SIM_RUN]).fetchone()[0]
    coarse = timeline.merged_intervals(ctx, 1, [int(rank) for rank in expected["rank"]],
                                       span // 100)
    assert coarse.groupby(["rank", "kind"]).size().max() <= 101
    assert len(coarse) < len(islands)
    assert (coarse["end_ns"] - coarse["start_ns"]).sum() >= islands["length"].sum()


def _fake_ranks(count: int, stages: int | None) -> pd.DataFrame:
    """``count`` ranks, equal spans; compute load makes rank 7 the slowest, rank 3 the fastest."""
    load = 1_000_000 + (np.arange(count) * 7919 % 1000) * 100
    load[7] = 9_000_000
    load[3] = 1
    return pd.DataFrame({
        "rank": np.arange(count),
        "span_ns": np.full(count, 10_000_000),
        "load_ns": load,
        "first_start_ns": np.zeros(count, dtype=np.int64),
        "pp_stage": (np.arange(count) // (count // stages)) if stages else pd.NA,
        "tp_rank": 0, "dp_rank": 0, "pp_group_index": 0,
    })


@pytest.mark.parametrize(("stages", "rows"), [(8, 24), (16, 16), (64, 32), (None, 32)])
def test_timeline_draws_representatives_at_1024_ranks(stages: int | None, rows: int) -> None:
    drawn, how = timeline.pick_ranks(_fake_ranks(1024, stages))
    assert len(drawn) == rows <= timeline.MAX_ROWS <= MAX_ROWS_PER_AXIS
    assert drawn["rank"].is_unique
    assert 7 in set(drawn["rank"])  # the slowest rank is always drawn
    assert "1024 ranks" in how and all(drawn["role"])
    if rows == 32:
        assert 3 in set(drawn["rank"])  # so is the fastest when ranks are spread by load


def test_timeline_draws_every_rank_when_they_fit() -> None:
    drawn, how = timeline.pick_ranks(_fake_ranks(16, 4))
    assert drawn["rank"].tolist() == list(range(16)) and how == "All 16 ranks drawn."


def test_pipeline_picks_first_most_idle_and_busiest_group() -> None:
    groups = pd.DataFrame({"pp_group_index": range(128), "stages": 8,
                           "span_ns": [100] * 50 + [900] + [100] * 77})
    chosen, how = pipeline.pick_groups(groups, None)
    assert chosen == [0, 50] and "128 PP groups" in how and "group 50 (the longest span)" in how
    bubbles = pd.DataFrame({"pp_group_index": [0, 0, 1, 1, 2, 2, 3, 3], "pp_stage": [0, 1] * 4,
                            "bubble_ns": [1, 1, 5, 5, 2, 2, 1, 1], "group_span_ns": [10] * 8,
                            "busy_ns": [9, 9, 5, 5, 8, 8, 9, 10]})
    chosen, how = pipeline.pick_groups(groups.head(4), bubbles)
    assert chosen == [0, 1, 3]
    assert "group 1 (the largest idle share)" in how and "group 3 (the most busy time)" in how
    # All three criteria on one group: drawn once.
    chosen, _ = pipeline.pick_groups(groups.head(4), bubbles.assign(
        bubble_ns=[9, 9, 1, 1, 1, 1, 1, 1], busy_ns=[9, 9, 1, 1, 1, 1, 1, 1]))
    assert chosen == [0]


def test_palette_is_complete() -> None:
    """Every kind and phase the marts can hold has a fixed colour (charts agree on colours)."""
    assert {"compute", "communication", "memory", "idle"} <= set(KIND_COLORS)
    assert {"forward", "backward", "recompute", "pp_p2p", "dp_sync", "optimizer",
            "other"} <= set(PHASE_COLORS)
    assert len(set(PHASE_COLORS.values())) == len(PHASE_COLORS)
