"""The viewer's timeline: level of detail from SQL, exact kernels zoomed in, collectives linked.

On the report tests' shared warehouse (the simulated TP2 × PP2 run ``sim_a``,
real ingest and build; read-only). The oracle is ``fct_kernels`` itself,
read whole and bucketed here in Python: every bucket's rectangle must be
its longest kernel, on the reference clock, and the buckets together must
account for every kernel in the window once.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlencode

import pytest

from browser import chromium_page
from report_warehouse import ReportWarehouse
from tracehouse.serve.server import ViewerServer
from tracehouse.serve.timeline import MAX_CELLS
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


def _aligned_kernels(report_wh: ReportWarehouse, run: str, ranks: list[int],
                     origin: int) -> list[tuple]:
    """(rank, stream, ts, dur, trace, slice) of the ranks' kernels, on the reference clock,
    relative to ``origin``."""
    return report_wh.rows("""
        select k.rank, k.stream, k.ts_ns + coalesce(o.offset_ns, 0) - ?, k.dur_ns,
               k.trace_id, k.slice_id
        from fct_kernels as k
        left join dim_rank_clock_offsets as o on o.run_id = k.run_id and o.rank = k.rank
        where k.run_id = ? and list_contains(?, k.rank)
    """, [origin, run, ranks])


def test_zoomed_out_each_bucket_is_its_longest_kernel(report_viewer: ViewerServer,
                                                      report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    choices = get(report_viewer, "timeline_choices", run=run)
    assert choices["groups"]["pp"] == [0, 1]
    window = choices["iterations"][0]
    shown = get(report_viewer, "timeline", run=run, group="pp", index=0, start=window["start"],
                 end=window["end"], px=60)
    ranks = [r for (r,) in report_wh.rows("select rank from dim_ranks where run_id = ? and "
                                          "pp_group_index = 0 order by rank", [run])]
    assert sorted({lane["rank"] for lane in shown["lanes"]}) == ranks
    assert not shown["exact"]

    start, end, step = shown["start"], shown["end"], shown["step"]
    expected: dict[tuple, list[tuple]] = defaultdict(list)
    for rank, stream, ts, dur, trace, slice_id in _aligned_kernels(
            report_wh, run, ranks, int(shown["origin_ns"])):
        if ts < end and ts + dur > start:
            expected[(rank, stream, (max(ts, start) - start) // step)].append(
                (dur, ts, trace, slice_id))
    rects = shown["rects"]
    got = {}
    for i in range(len(rects["ts"])):
        lane = shown["lanes"][rects["lane"][i]]
        if lane["stream"] == "cpu":  # the rank's CPU step frames: the next test's
            continue
        bucket = (max(rects["ts"][i], start) - start) // step
        got[(lane["rank"], lane["stream"], bucket)] = (
            rects["n"][i], rects["dur"][i], rects["ts"][i], shown["traces"][rects["trace"][i]],
            rects["slice"][i])
    assert got.keys() == expected.keys()
    for key, members in expected.items():
        count, dur, ts, trace, slice_id = got[key]
        assert count == len(members)
        assert dur == max(member[0] for member in members)
        assert (dur, ts, trace, slice_id) in members  # a longest one, exactly as stored
    kernel_lanes = [lane for lane in shown["lanes"] if lane["stream"] != "cpu"]
    assert len(got) <= len(kernel_lanes) * shown["buckets"] <= MAX_CELLS


def test_each_ranks_cpu_steps_have_a_lane(report_viewer: ViewerServer,
                                          report_wh: ReportWarehouse) -> None:
    """The outermost Megatron step frames (fct_cpu_steps), bucketed as the kernels are: on a
    CPU-only run they are all the timeline has."""
    run = report_wh.need("tp1_pp4_dp2")
    window = get(report_viewer, "timeline_choices", run=run)["iterations"][0]
    shown = get(report_viewer, "timeline", run=run, ranks="0-3", start=window["start"],
                end=window["end"], px=400)
    assert [(lane["rank"], lane["stream"]) for lane in shown["lanes"]] == [
        (rank, "cpu") for rank in range(4)]
    (frames,), = report_wh.rows(
        "select count(*) from fct_cpu_steps as s left join dim_rank_clock_offsets as o "
        "on o.run_id = s.run_id and o.rank = s.rank where s.run_id = ? and s.rank < 4 "
        "and s.is_outermost and s.ts_ns + coalesce(o.offset_ns, 0) - ? < ? "
        "and s.end_ns + coalesce(o.offset_ns, 0) - ? > ?",
        [run, int(shown["origin_ns"]), window["end"], int(shown["origin_ns"]),
         window["start"]])
    assert sum(shown["rects"]["n"]) == frames > 0
    assert {shown["kind_names"][k] for k in shown["rects"]["kind"]} >= {"forward", "backward"}


def test_zoomed_in_the_kernels_are_exact(report_viewer: ViewerServer,
                                         report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    origin = int(get(report_viewer, "timeline_choices", run=run)["origin_ns"])
    kernels = _aligned_kernels(report_wh, run, [0], origin)
    middle = sorted(kernels, key=lambda k: k[2])[len(kernels) // 2]
    start, end = middle[2] - 20_000, middle[2] + 20_000
    shown = get(report_viewer, "timeline", run=run, ranks="0", start=start, end=end, px=2000)
    assert shown["exact"]
    inside = {(trace, slice_id, ts, dur) for _r, _s, ts, dur, trace, slice_id in kernels
              if ts < end and ts + dur > start}
    rects = shown["rects"]
    assert {(shown["traces"][rects["trace"][i]], rects["slice"][i], rects["ts"][i],
             rects["dur"][i]) for i in range(len(rects["ts"]))
            if shown["lanes"][rects["lane"][i]]["stream"] != "cpu"} == inside
    assert len(inside) >= 1


def test_collectives_link_their_members_in_arrival_order(report_viewer: ViewerServer,
                                                         report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    choices = get(report_viewer, "timeline_choices", run=run)
    window = choices["iterations"][0]
    shown = get(report_viewer, "timeline", run=run, ranks="0-3", start=window["start"],
                 end=window["end"])
    assert shown["links"] and shown["links_left_out"] == 0
    origin = int(shown["origin_ns"])
    members = defaultdict(list)
    for cid, rank, arrival, is_last in report_wh.rows(
            "select collective_id, rank, arrival_ns, is_last "
            "from fct_collective_ranks where run_id = ? and iteration = ? "
            "order by arrival_order, rank", [run, window["key"]]):
        members[cid].append((rank, arrival - origin, is_last))
    expected = sorted([chain for chain in members.values() if len(chain) >= 2])
    got = sorted([[(shown["lanes"][lane]["rank"], arrival, last)
                   for lane, arrival, _end, _wait, last in link["members"]]
                  for link in shown["links"]])
    assert [[tuple(m) for m in chain] for chain in got] == expected
    for link in shown["links"]:
        arrivals = [member[1] for member in link["members"]]
        assert arrivals == sorted(arrivals) and link["members"][-1][4]


def test_the_timeline_in_a_browser_zooms_to_exact_and_opens_a_kernel(
        report_viewer: ViewerServer, report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    with chromium_page() as page:
        where = urlencode({'run': run, 'group': 'pp', 'index': 0})
        page.open(f"{report_viewer.url}#/timeline?{where}")
        ready = ("document.body?.dataset.state === 'ready' && "
                 "document.getElementById('timeline')?.dataset.lanes")
        page.wait_for(ready, "the timeline")
        lanes = int(page.evaluate("document.getElementById('timeline').dataset.lanes"))
        ranks = report_wh.rows("select rank from dim_ranks where run_id = ? "
                               "and pp_group_index = 0", [run])
        assert lanes == len(ranks) + len(report_wh.rows(  # a CPU steps lane per rank
            "select distinct k.rank, k.stream from fct_kernels k join dim_ranks d "
            "on d.run_id = k.run_id and d.rank = k.rank where k.run_id = ? "
            "and d.pp_group_index = 0 and k.iteration = 1", [run]))
        box = page.evaluate("""(() => { const c = document.getElementById('timeline');
            const r = c.getBoundingClientRect();
            return [r.left + +c.dataset.left + 40, r.top + +c.dataset.top + 5]; })()""")
        for _ in range(25):  # scroll the wheel until every pixel holds one kernel
            page.call("Input.dispatchMouseEvent", type="mouseWheel", x=box[0], y=box[1],
                      deltaX=0, deltaY=-120)
        page.wait_for("document.getElementById('timeline').dataset.exact === 'true' && "
                      "document.body.dataset.state === 'ready'", "an exact view")
        # Click the middle of the first kernel drawn on the first lane of kernels.
        target = page.evaluate("""(async () => {
            const c = document.getElementById('timeline'), d = c.dataset;
            const url = '/api/timeline?' + new URLSearchParams({run: __RUN__, group: 'pp',
                index: 0, start: d.start, end: d.end, px: Math.round(d.width - d.left)});
            const data = await (await fetch(url)).json();
            const first = data.lanes.findIndex((lane) => lane.stream !== 'cpu');
            const i = data.rects.lane.findIndex((lane, k) => lane === first &&
                data.rects.ts[k] >= +d.start);
            if (i < 0) return null;
            const span = +d.end - +d.start, w = +d.width - +d.left;
            const x = +d.left + (data.rects.ts[i] + data.rects.dur[i] / 2 - d.start) / span * w;
            const r = c.getBoundingClientRect();
            return [r.left + x, r.top + +d.top + (first + 0.5) * +d.laneH,
                    data.traces[data.rects.trace[i]], data.rects.slice[i]];
        })()""".replace("__RUN__", json.dumps(run)))
        assert target is not None, "no kernel on the first lane after zooming in"
        page.click_at(target[0], target[1])
        page.wait_for("document.getElementById('view')?.dataset.view === 'kernel' && "
                      "!!document.querySelector('dl.kernel')", "the kernel view")
        fields = dict(page.evaluate(
            "[...document.querySelectorAll('dl.kernel dt')]"
            ".map(dt => [dt.textContent, dt.nextElementSibling.dataset.value])"))
        assert (fields["trace_id"], int(fields["slice_id"])) == (target[2], target[3])
        assert page.console == [] and page.dialogs == []


def test_the_selection_cache_answers_as_the_marts_do(report_viewer: ViewerServer,
                                                     report_wh: ReportWarehouse,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A selection's later windows come from the viewer's in-memory cache, filled window by
    window (a window past what it holds adds the rest: zoom out, pan before, then inside);
    the answers must be the ones read straight from the marts, and only CACHE_ENTRIES
    selections are kept."""
    from tracehouse.serve import timeline as module

    run = report_wh.need("sim_a")
    window = get(report_viewer, "timeline_choices", run=run)["iterations"][1]
    span = window["end"] - window["start"]
    views = [dict(ranks=ranks, start=window["start"] + shift, end=window["end"] - shift, px=px)
             for ranks, shift, px in (("0-3", 0, 300), ("1,3", 100_000, 1200), ("2", 0, 90),
                                      ("0-3", -span // 2, 300), ("0-3", -span, 700))]
    views += [dict(ranks="0-3", start=window["start"] - 2 * span, end=window["start"], px=500),
              dict(ranks="0-3", start=window["start"] + span // 3,
                   end=window["start"] + span // 2, px=1200)]
    cached = [get(report_viewer, "timeline", run=run, **view) for view in views]
    monkeypatch.setattr(module, "CACHE_MAX_RANKS", 0)
    direct = [get(report_viewer, "timeline", run=run, **view) for view in views]
    assert cached == direct
    assert all(answer["links"] for answer in cached[:2])

    monkeypatch.setattr(module, "CACHE_MAX_RANKS", 64)
    monkeypatch.setattr(module, "CACHE_ENTRIES", 2)
    for view in views:
        get(report_viewer, "timeline", run=run, **view)
    with report_viewer.reader.cursor() as cur:
        kept = cur.execute("select table_name from duckdb_tables() where database_name = "
                           "'memory' and table_name like 'timeline_%' and table_name not "
                           "like '%_members' and table_name not like '%_frames' "
                           "and table_name <> 'timeline_cache_use'").fetchall()
    assert len(kept) == 2


def _busy_buckets(report_wh: ReportWarehouse, run: str, origin: int) -> list[tuple]:
    """(rank, start, length, busy, compute, communication, memory) of every bucket of
    fct_rank_busy_buckets, its start on the reference clock relative to ``origin``."""
    return report_wh.rows("""
        select b.rank, b.bucket_start_ns + coalesce(o.offset_ns, 0) - ?, b.bucket_ns,
               b.busy_ns, b.compute_ns, b.communication_ns, b.memory_ns
        from fct_rank_busy_buckets as b
        left join dim_rank_clock_offsets as o on o.run_id = b.run_id and o.rank = b.rank
        where b.run_id = ?
    """, [origin, run])


def test_zoomed_out_over_many_ranks_cells_hold_busy_buckets(
        report_viewer: ViewerServer, report_wh: ReportWarehouse,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Above MAX_STREAM_RANKS ranks (here: any), where a cell holds a bucket or more of
    fct_rank_busy_buckets, each cell is the sum of the buckets whose middle falls in it,
    drawn from the first one's start to the last one's end; zoomed in, kernels again."""
    from tracehouse.serve import timeline as module

    monkeypatch.setattr(module, "MAX_STREAM_RANKS", 0)
    run = report_wh.need("sim_a")
    window = get(report_viewer, "timeline_choices", run=run)["iterations"][0]
    shown = get(report_viewer, "timeline", run=run, ranks="0-3", start=window["start"],
                end=window["end"], px=100)
    assert shown["mode"] == "busy" and not shown["exact"]
    assert [lane["rank"] for lane in shown["lanes"]] == [0, 1, 2, 3]
    start, end, step = shown["start"], shown["end"], shown["step"]
    expected: dict[tuple[int, int], list[tuple]] = defaultdict(list)
    for rank, ts, width, *busy in _busy_buckets(report_wh, run, int(shown["origin_ns"])):
        if ts < end and ts + width > start:
            assert width <= step  # a cell holds at least one bucket
            expected[(rank, (max(ts + width // 2, start) - start) // step)].append(
                (ts, width, *busy))
    cells = shown["rects"]
    # A cell is keyed by its rank and its first bucket's start (one cell per bucket set).
    got = {(shown["lanes"][cells["lane"][i]]["rank"], cells["ts"][i]): i
           for i in range(len(cells["ts"]))}
    assert len(got) == len(cells["ts"]) == len(expected) > 0
    for (rank, _cell), members in expected.items():
        first = min(member[0] for member in members)
        i = got[(rank, first)]
        assert cells["dur"][i] == max(m[0] + m[1] for m in members) - first
        sums = [sum(m[k] for m in members) for k in range(2, 6)]
        assert [cells[key][i] for key in ("busy", "compute", "communication", "memory")] == sums
        assert shown["kind_names"][cells["kind"][i]] == \
            ("compute", "communication", "memory")[sums[1:].index(max(sums[1:]))]
        assert 0 <= cells["busy"][i] <= cells["dur"][i]
    assert shown["links"]  # collectives, from fct_collective_ranks at this zoom

    span = window["end"] - window["start"]
    closer = get(report_viewer, "timeline", run=run, ranks="0-3", start=window["start"],
                 end=window["start"] + span // 64, px=1200)
    assert closer["mode"] == "kernels"


def test_the_busy_timeline_in_a_browser(report_viewer: ViewerServer, report_wh: ReportWarehouse,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy cells are drawn with their share as depth and explained on hover; zooming in
    turns them back into kernels (a screenshot of each with TRACEHOUSE_SCREENSHOTS=DIR)."""
    from tracehouse.serve import timeline as module

    # Four ranks drawn as many are: a lane per rank, 100 cells each (a bucket or more).
    monkeypatch.setattr(module, "MAX_STREAM_RANKS", 0)
    monkeypatch.setattr(module, "MAX_CELLS", 400)
    run = report_wh.need("sim_a")
    window = get(report_viewer, "timeline_choices", run=run)["iterations"][0]
    folder = os.environ.get("TRACEHOUSE_SCREENSHOTS")
    with chromium_page() as page:
        where = urlencode({"run": run, "ranks": "0-3", "start": window["start"],
                           "end": window["end"]})
        page.open(f"{report_viewer.url}#/timeline?{where}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.getElementById('timeline')?.dataset.lanes", "the timeline")
        status = page.evaluate("document.getElementById('timeline-status').textContent")
        assert "busy time per" in status, status
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            page.screenshot(Path(folder) / "timeline_busy.png")
        box = page.evaluate("""(() => { const c = document.getElementById('timeline');
            const r = c.getBoundingClientRect(), d = c.dataset;
            return [r.left + +d.left + (+d.width - +d.left) / 2,
                    r.top + +d.top + +d.laneH / 2]; })()""")
        page.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
        page.wait_for("/busy over/.test(document.getElementById('tooltip')?.textContent || '')",
                      "the busy cell's tooltip")
        for _ in range(25):
            page.call("Input.dispatchMouseEvent", type="mouseWheel", x=box[0], y=box[1],
                      deltaX=0, deltaY=-120)
        page.wait_for("document.body.dataset.state === 'ready' && /slices drawn/.test("
                      "document.getElementById('timeline-status').textContent)", "kernels")
        if folder:
            page.screenshot(Path(folder) / "timeline_busy_zoomed.png")
        assert page.console == [] and page.dialogs == []
