"""The viewer's pipeline view: stages, bubbles and microbatch blocks from the pipeline marts.

On the report tests' shared warehouse (read-only): the simulated TP2 × PP2
run ``sim_a`` and, when ../shared/data is there, the real CPU-only
Megatron run ``tp1_pp4_dp2`` (PP4, 8 microbatches). Every figure must be a
column of ``fct_pipeline_bubbles``, ``fct_pipeline_bubble_parts`` or
``fct_microbatch_phases``; in Chromium a click on a block opens that
stage's rank with only the block's kernels.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from browser import chromium_page
from report_warehouse import ReportWarehouse
from tracehouse.serve.server import ViewerServer
from viewer import get

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse


@pytest.mark.parametrize("run", ["sim_a", "tp1_pp4_dp2"])
def test_the_gantt_is_the_pipeline_marts(report_viewer: ViewerServer, report_wh: ReportWarehouse,
                                         run: str) -> None:
    run = report_wh.need(run)
    (group, iteration), = report_wh.rows(
        "select pp_group_index, iteration from fct_pipeline_bubbles where run_id = ? "
        "order by 1, 2 limit 1", [run])
    shown = get(report_viewer, "pipeline", run=run, group=group, iteration=iteration)
    stages = report_wh.rows(
        "select pp_stage, rank, busy_ns, bubble_ns, bubble_ratio, group_start_ns, group_span_ns "
        "from fct_pipeline_bubbles where run_id = ? and pp_group_index = ? and iteration = ? "
        "order by pp_stage", [run, group, iteration])
    assert [[cell[0] for cell in row["cells"][:5]] for row in shown["bubbles"]["rows"]] == \
        [list(stage[:5]) for stage in stages]
    origin, span = stages[0][5], stages[0][6]
    assert shown["span"] == span
    blocks = report_wh.rows(
        "select rank, phase, microbatch, first_start_ns - ?, last_end_ns - ? "
        "from fct_microbatch_phases where run_id = ? and iteration = ? "
        "and list_contains(?, rank) and microbatch is not null order by rank, first_start_ns",
        [origin, origin, run, iteration, [stage[1] for stage in stages]])
    assert [(b["rank"], b["phase"], b["microbatch"], b["start"], b["end"])
            for b in shown["blocks"]] == blocks
    assert {b["phase"] for b in shown["blocks"]} >= {"forward", "backward"}
    parts = report_wh.rows(
        "select pp_stage, schedule_part, bubble_ns, p2p_wait_ns from fct_pipeline_bubble_parts "
        "where run_id = ? and pp_group_index = ? and iteration = ? "
        "order by pp_stage, part_order", [run, group, iteration])
    assert [[row["cells"][i][0] for i in (0, 1, 3, 4)] for row in shown["parts"]["rows"]] == \
        [list(part) for part in parts]


def test_a_run_without_pipeline_groups_says_so(report_viewer: ViewerServer,
                                               report_wh: ReportWarehouse) -> None:
    run = report_wh.need("hostile")
    with pytest.raises(AssertionError, match="400: .*no pipeline groups"):
        get(report_viewer, "pipeline", run=run)


def test_a_click_on_a_block_opens_its_kernels(report_viewer: ViewerServer,
                                              report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    with chromium_page() as page:
        where = urlencode({'run': run, 'group': 0, 'iteration': 1})
        page.open(f"{report_viewer.url}#/pipeline?{where}")
        page.wait_for("document.body?.dataset.state === 'ready' && "
                      "document.getElementById('pipeline')?.dataset.blocks", "the pipeline")
        shown = get(report_viewer, "pipeline", run=run, group=0, iteration=1)
        block = next(b for b in shown["blocks"] if b["stage"] == 1 and b["phase"] == "backward")
        box = page.evaluate("""(() => { const c = document.getElementById('pipeline');
            const r = c.getBoundingClientRect(), d = c.dataset;
            return [r.left, r.top, +d.left, +d.top, +d.row, +d.width, +d.start, +d.end]; })()""")
        left, top, origin_x, origin_y, row, width, start, end = box
        x = left + origin_x + ((block["start"] + block["end"]) / 2 - start) / (end - start) * (
            width - origin_x)
        y = top + origin_y + 1.5 * row  # the second stage's row
        page.click_at(x, y)
        page.wait_for("document.getElementById('view')?.dataset.view === 'rank' && "
                      "document.getElementById('kernel-count')?.textContent",
                      "the block's kernels")
        (count,), = report_wh.rows(
            "select count(*) from fct_kernels where run_id = ? and rank = ? and iteration = 1 "
            "and phase = 'backward' and microbatch = ?", [run, block["rank"], block["microbatch"]])
        assert count > 0
        assert page.evaluate("document.getElementById('kernel-count').textContent") \
            .endswith(f"of {count} kernels")
        assert page.evaluate("document.getElementById('kernel-block').textContent") == \
            f"Only the kernels of phase backward · microbatch {block['microbatch']}."
        assert page.console == [] and page.dialogs == []
