"""The viewer's annotation tree: levels, search and timeline windows from ``fct_annotation_ranges``.

On the report tests' shared warehouse (read-only): the simulated run
``sim_a`` (ProfilerStep ranges holding NCCL ranges) and, when
../shared/data is there, the real ``dlrm_8rank`` (ranges six deep). In
Chromium: open a range, search, follow a hit to the timeline.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlencode

import pytest

from browser import chromium_page
from report_warehouse import ReportWarehouse
from tracehouse.serve.server import ViewerServer
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


@pytest.mark.parametrize("run", ["sim_a", "dlrm_8rank"])
def test_levels_are_the_marts_tree(report_viewer: ViewerServer, report_wh: ReportWarehouse,
                                   run: str) -> None:
    run = report_wh.need(run)
    roots = get(report_viewer, "annotations", run=run, rank=0)
    expected = report_wh.rows(
        "select trace_id, slice_id, name from fct_annotation_ranges where run_id = ? "
        "and rank = 0 and parent_range_id is null order by ts_ns, slice_id", [run])
    assert [(n["key"]["trace"], n["key"]["slice"], n["name"]) for n in roots["nodes"]] == \
        expected
    # Walk down the first range with children to the bottom, level by level.
    node = next(n for n in roots["nodes"] if n["children"])
    depth = 0
    while node is not None:
        level = get(report_viewer, "annotations", run=run, rank=0, trace=node["key"]["trace"],
                    slice=node["key"]["slice"])
        children = report_wh.rows(
            "select slice_id, annotation_depth from fct_annotation_ranges where run_id = ? "
            "and rank = 0 and trace_id = ? and parent_range_id = ? order by ts_ns, slice_id",
            [run, node["key"]["trace"], node["key"]["slice"]])
        assert [(n["key"]["slice"], n["depth"]) for n in level["nodes"]] == children
        assert node["children"] == len(children)
        depth += 1
        node = next((n for n in level["nodes"] if n["children"]), None)
    assert depth >= 1


def test_the_top_level_names_each_ranges_thread(report_viewer: ViewerServer,
                                                report_wh: ReportWarehouse) -> None:
    """The steps on the main thread, the NCCL ranges autograd's thread records apart: each
    top-level range carries its thread as the mart names it."""
    run = report_wh.need("sim_a")
    roots = get(report_viewer, "annotations", run=run, rank=0)["nodes"]
    expected = dict(((trace, slice_id), thread) for trace, slice_id, thread in report_wh.rows(
        "select trace_id, slice_id, thread_name from fct_annotation_ranges where run_id = ? "
        "and rank = 0 and parent_range_id is null", [run]))
    assert {(n["key"]["trace"], n["key"]["slice"]): n["thread"] for n in roots} == expected
    steps = {n["thread"] for n in roots if n["name"].startswith("ProfilerStep#")}
    nccl = {n["thread"] for n in roots if n["name"].startswith("nccl:")}
    assert len(steps) == 1 and nccl and not steps & nccl, (steps, nccl)


def test_search_is_a_substring_with_paths(report_viewer: ViewerServer,
                                          report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    hits = get(report_viewer, "annotations", run=run, rank=0, q="ALL_reduce")
    expected = report_wh.rows(
        "select annotation_path from fct_annotation_ranges where run_id = ? and rank = 0 "
        "and contains(lower(name), 'all_reduce') order by ts_ns, slice_id", [run])
    assert [n["path"] for n in hits["nodes"]] == [path for (path,) in expected]
    assert expected
    assert get(report_viewer, "annotations", run=run, rank=0, q="%")["nodes"] == []


def test_a_range_opens_its_gpu_projection_on_the_timeline(report_viewer: ViewerServer,
                                                          report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    origin = int(get(report_viewer, "timeline_choices", run=run)["origin_ns"])
    hit = next(n for n in get(report_viewer, "annotations", run=run, rank=1, q="nccl")["nodes"]
               if n["figures"][2][1][0] > 0)
    (start, end, offset), = report_wh.rows(
        "select r.gpu_start_ns, r.gpu_end_ns, coalesce(o.offset_ns, 0) "
        "from fct_annotation_ranges as r left join dim_rank_clock_offsets as o "
        "on o.run_id = r.run_id and o.rank = r.rank "
        "where r.run_id = ? and r.trace_id = ? and r.slice_id = ?",
        [run, hit["key"]["trace"], hit["key"]["slice"]])
    assert hit["window"] == [start + offset - origin, end + offset - origin]
    shown = get(report_viewer, "timeline", run=run, ranks="1", start=hit["window"][0],
                end=hit["window"][1])
    assert sum(shown["rects"]["n"]) >= hit["figures"][2][1][0]  # its kernels are there


def test_the_tree_in_a_browser(report_viewer: ViewerServer, report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    with chromium_page() as page:
        page.open(f"{report_viewer.url}#/annotations?{urlencode({'run': run, 'rank': 0})}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.querySelectorAll('#tree .node').length", "the tree")
        # One tree per thread, in order of their first range; the first one open.
        nodes = get(report_viewer, "annotations", run=run, rank=0)["nodes"]
        threads = list(dict.fromkeys(node["thread"] for node in nodes))
        assert len(threads) >= 2
        assert page.evaluate("[...document.querySelectorAll('#tree > ul > li')]"
                             ".map(li => li.dataset.thread)") == threads
        assert page.evaluate("document.querySelectorAll('#tree > ul > li:first-child "
                             ".children .node').length") == sum(
            node["thread"] == threads[0] for node in nodes)
        page.click("document.querySelector('#tree .children button.toggle:not([disabled])')")
        page.wait_for("document.querySelector('#tree .children .children .node')",
                      "a range's children")
        first = next(node for node in nodes if node["thread"] == threads[0] and node["children"])
        opened = page.evaluate(
            "document.querySelectorAll('#tree .children .children .node').length")
        assert opened == first["children"]
        folder = os.environ.get("TRACEHOUSE_SCREENSHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            page.screenshot(Path(folder) / "annotations_by_thread.png")

        page.click("document.getElementById('tree-search')")
        page.type_text("nccl:broadcast")
        page.evaluate("document.getElementById('tree-search')"
                      ".dispatchEvent(new Event('change'))")
        page.wait_for("document.body.dataset.state === 'ready' && "
                      "location.hash.includes('q=nccl') && "
                      "document.querySelectorAll('#tree .node').length", "the search hits")
        names = page.evaluate("[...document.querySelectorAll('#tree .node .name')]"
                              ".map(n => n.textContent)")
        assert names and all(name.endswith("nccl:broadcast") and " > " in name
                             for name in names)
        page.click("document.querySelector('#tree a.to-timeline')")
        page.wait_for("document.getElementById('view')?.dataset.view === 'timeline' && "
                      "document.getElementById('timeline')?.dataset.lanes", "the timeline")
        assert page.console == [] and page.dialogs == []


def test_each_thread_counts_its_top_ranges_in_words(report_viewer: ViewerServer,
                                                    report_wh: ReportWarehouse) -> None:
    """Each thread's node says how many ranges sit at its top, singular for one (the real
    DLRM trace's rank 0 has a thread with a single top-level range)."""
    run = report_wh.need("dlrm_8rank")
    nodes = get(report_viewer, "annotations", run=run, rank=0)["nodes"]
    counts = {}
    for node in nodes:
        counts[node["thread"]] = counts.get(node["thread"], 0) + 1
    assert 1 in counts.values() and len(counts) >= 2
    with chromium_page() as page:
        page.open(f"{report_viewer.url}#/annotations?{urlencode({'run': run, 'rank': 0})}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.querySelectorAll('#tree .node.thread').length", "the threads")
        shown = page.evaluate("[...document.querySelectorAll('#tree > ul > li')]"
                              ".map(li => [li.dataset.thread, "
                              "li.querySelector('.node.thread .figure').textContent])")
        assert page.console == [] and page.dialogs == []
    assert dict(shown) == {thread: f"{count} range{'' if count == 1 else 's'} at the top"
                           for thread, count in counts.items()}
