"""``tracehouse serve`` in a real browser: click through run → iteration → rank → kernel.

Headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it) drives the
page over the DevTools protocol (tests/browser.py) on the report tests'
shared warehouse (tests/report_warehouse.py: a simulated TP2 × PP2 run with
a straggler, two hand-written traces whose kernels are named
``<script>alert(1)</script>`` and ``void f<"a" & 'b'>(int)``, a CPU-only run
and, when ../shared/data is there, real traces). The clicks are real mouse
events at the elements' places on screen, the heatmap's included; every
figure checked on screen is compared with the mart row it must come from,
and a page that logs anything to the console, or opens a dialog, fails.

Set ``TRACEHOUSE_SCREENSHOTS=DIR`` to keep a screenshot of each view for a
person to look at (they are never written into the repository).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from browser import Chromium, chromium_page
from report_warehouse import HOSTILE_KERNEL, QUOTED_KERNEL, ReportWarehouse
from tracehouse.query.findings import print_findings
from tracehouse.reports.findings import figure_text
from tracehouse.reports.html import STEP_PARTS, ms, pct, pct_parts
from tracehouse.serve.finding_links import serve_view
from tracehouse.serve.params import WHOLE_TRACE
from tracehouse.serve.server import ViewerServer

pytestmark = pytest.mark.slow  # reads the report tests' built warehouse

READY = "document.body?.dataset.state === 'ready'"


@pytest.fixture(scope="module")
def viewer(report_viewer: ViewerServer) -> str:
    """The URL of the viewer over the shared warehouse (read-only)."""
    return report_viewer.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with chromium_page() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Chromium) -> Iterator[Chromium]:
    """The browser, with this test's console messages and dialogs checked at its end."""
    browser.console.clear()
    browser.dialogs.clear()
    yield browser
    assert browser.dialogs == [], "a trace string ran as script"
    assert browser.console == []


def _shoot(page: Chromium, name: str) -> None:
    folder = os.environ.get("TRACEHOUSE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(Path(folder) / f"{name}.png")


def _show(page: Chromium, url: str, view: str, ready: str, name: str) -> None:
    """Open ``url`` and wait for the view to be drawn (``ready``: a JavaScript condition)."""
    # A new hash on the same page: mark the old view stale, so it is not taken for the new one.
    page.evaluate("document.body && (document.body.dataset.state = 'stale')")
    if page.evaluate("location.href") == url:
        page.call("Page.reload")  # the same hash again fires no hashchange: load it anew
    else:
        page.open(url)
    page.wait_for(f"{READY} && document.getElementById('view')?.dataset.view === '{view}' "
                  f"&& !!({ready})", f"the {view} view")
    _shoot(page, name)


def _values(page: Chromium, selector: str) -> list[list[str]]:
    """``[text, data-value]`` of every element matching ``selector``."""
    return page.evaluate(f"[...document.querySelectorAll({selector!r})]"
                         ".map(n => [n.textContent, n.dataset.value])")


def _wait_view(page: Chromium, view: str, ready: str, name: str) -> None:
    page.wait_for(f"{READY} && document.getElementById('view')?.dataset.view === '{view}' "
                  f"&& !!({ready})", f"the {view} view after a click")
    _shoot(page, name)


def test_click_through_run_iteration_rank_kernel(viewer: str, page: Chromium,
                                                  report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    _show(page, viewer, "runs", "document.querySelector('table.runs')", "runs")
    listed = page.evaluate("[...document.querySelectorAll('table.runs tbody tr')]"
                           ".map(r => r.cells[0].textContent)")
    assert listed == [r[0] for r in report_wh.rows(
        "select run_id from fct_run_summary order by run_id")]

    # run: the headline is the report's, from fct_run_summary
    page.click(f"[...document.querySelectorAll('table.runs tbody tr')]"
               f".find(r => r.cells[0].textContent === {run!r})")
    _wait_view(page, "run", "document.querySelector('#heatmap')", "overview")
    cards = dict(page.evaluate(
        "[...document.querySelectorAll('.card')]"
        ".map(c => [c.dataset.label, c.querySelector('.value').textContent])"))
    parts = STEP_PARTS["gpu"]
    wanted = ["ranks", "mean_step_ns", "overlap_ratio", "bubble_ratio",
              *(column for column, _, _ in parts)]
    summary = dict(zip(wanted, report_wh.rows(
        f"select {', '.join(wanted)} from fct_run_summary where run_id = ?", [run])[0]))
    expected = {"ranks": f"{summary['ranks']:,}", "mean step time": ms(summary["mean_step_ns"]),
                "overlap ratio": pct(summary["overlap_ratio"]),
                "pipeline bubble": pct(summary["bubble_ratio"]),
                **{label: text for (column, label, _), text in zip(
                    parts, pct_parts([summary[column] for column, _, _ in parts]))}}
    assert {label: cards.get(label) for label in expected} == expected

    # iterations side by side: fct_iteration_summary, one column per iteration
    steps = _values(page, "table.iterations tr[data-figure='step (slowest rank)'] td")
    by_iteration = report_wh.rows("select step_ns from fct_iteration_summary where run_id = ? "
                                  "order by iteration", [run])
    assert steps == [[ms(step), str(step)] for (step,) in by_iteration]

    # iteration 2: its ranks, slowest first (fct_rank_iterations)
    page.click("document.querySelector('table.iterations button[data-iteration=\"2\"]')")
    _wait_view(page, "iteration", "document.querySelector('table.ranks')", "iteration")
    ranks = report_wh.rows("select rank, step_ns from fct_rank_iterations where run_id = ? "
                           "and iteration = 2 order by step_ns desc, rank", [run])
    shown = page.evaluate("[...document.querySelectorAll('table.ranks tbody tr')]"
                          ".map(r => [r.cells[0].textContent, r.cells[1].dataset.value])")
    assert [(int(re.match(r"rank (\d+)", label).group(1)), int(step)) for label, step in shown] \
        == [tuple(row) for row in ranks]

    # the slowest rank: its step and parts, which add up to the step
    slowest = ranks[0][0]
    page.click("document.querySelector('table.ranks tbody tr')")
    _wait_view(page, "rank", "document.querySelector('table.kernels')", "rank")
    on_screen = {column: int(value) for column, value in page.evaluate(
        "[...document.querySelectorAll('table.parts tr[data-column]')]"
        ".map(r => [r.dataset.column, r.querySelector('td.num').dataset.value])")}
    assert all(re.fullmatch(r"step(_[a-z_]+)?_ns", column) for column in on_screen)
    in_mart = report_wh.rows(f"select {', '.join(on_screen)} from fct_rank_iterations "
                             "where run_id = ? and rank = ? and iteration = 2", [run, slowest])
    assert on_screen == dict(zip(on_screen, in_mart[0]))
    assert on_screen["step_ns"] == sum(v for c, v in on_screen.items() if c != "step_ns")
    assert len(on_screen) >= 6

    # its kernels, longest first, counted as fct_kernels counts them
    (count, longest), = report_wh.rows(
        "select count(*), max(dur_ns) from fct_kernels where run_id = ? and rank = ? "
        "and iteration = 2", [run, slowest])
    assert page.evaluate("document.getElementById('kernel-count').textContent") \
        .endswith(f"of {count} kernels")
    first = page.evaluate("[...document.querySelector('table.kernels tbody tr').cells]"
                          ".map(c => c.dataset.value)")
    assert int(first[1]) == longest

    # one kernel: every column fct_kernels holds for it
    page.click("document.querySelector('table.kernels tbody tr')")
    _wait_view(page, "kernel", "document.querySelector('dl.kernel')", "kernel")
    fields = dict(page.evaluate(
        "[...document.querySelectorAll('dl.kernel dt')]"
        ".map(dt => [dt.textContent, dt.nextElementSibling.dataset.value])"))
    kernel = report_wh.rows("select name, dur_ns, rank, iteration from fct_kernels "
                            "where run_id = ? and trace_id = ? and slice_id = ?",
                            [run, fields["trace_id"], int(fields["slice_id"])])
    assert kernel == [(fields["name"], longest, slowest, 2)]
    assert page.evaluate("document.querySelector('h1').textContent") == fields["name"]


def test_a_heatmap_cell_opens_that_ranks_iteration(viewer: str, page: Chromium,
                                                    report_wh: ReportWarehouse) -> None:
    run = report_wh.need("sim_a")
    _show(page, f"{viewer}#/run?{urlencode({'run': run})}", "run",
          "document.querySelector('#heatmap')", "heatmap-step")
    page.evaluate("(() => { const s = document.getElementById('heatmap-part');"
                  " s.value = 'step_idle_ns'; s.dispatchEvent(new Event('change')); })()")
    page.wait_for("document.querySelector('#heatmap')?.dataset.part === 'step_idle_ns'",
                  "the idle heatmap")
    _shoot(page, "heatmap-idle")
    ranks = [r for (r,) in report_wh.rows("select distinct rank from fct_rank_iterations "
                                          "where run_id = ? order by rank", [run])]
    target_rank, target_iteration = ranks[2], 2
    box = page.evaluate("""(() => {
        const c = document.getElementById('heatmap');
        c.scrollIntoView({block: 'center'});
        const r = c.getBoundingClientRect();
        return [r.left, r.top, +c.dataset.left, +c.dataset.top, +c.dataset.cellW,
                +c.dataset.cellH];
    })()""")
    left, top, origin_x, origin_y, cell_w, cell_h = box
    iteration_column = [it for (it,) in report_wh.rows(
        "select distinct iteration from fct_rank_iterations where run_id = ? "
        "and step_ns is not null order by iteration", [run])].index(target_iteration)
    x = left + origin_x + (iteration_column + 0.5) * cell_w
    y = top + origin_y + (ranks.index(target_rank) + 0.5) * cell_h
    page.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
    (idle,), = report_wh.rows("select step_idle_ns from fct_rank_iterations where run_id = ? "
                              "and rank = ? and iteration = ?",
                              [run, target_rank, target_iteration])
    tip = page.wait_for("!document.getElementById('tooltip').hidden && "
                        "document.getElementById('tooltip').textContent", "the cell's tooltip")
    assert f"rank {target_rank} " in tip and f"iteration {target_iteration}" in tip
    assert f"{idle / 1e6:.3f} ms" in tip
    page.click_at(x, y)
    _wait_view(page, "rank", "document.querySelector('table.parts')", "heatmap-click")
    assert page.evaluate("document.querySelector('table.parts tr[data-column=\"step_idle_ns\"]"
                         " td.num').dataset.value") == str(idle)
    assert f"rank {target_rank} " in page.evaluate("document.querySelector('h1').textContent")


def test_hostile_kernel_names_are_text_never_script(viewer: str, page: Chromium,
                                                    report_wh: ReportWarehouse) -> None:
    run = report_wh.need("hostile")
    _show(page, f"{viewer}#/run?{urlencode({'run': run})}", "run",
          "document.querySelector('table.top-kernels')", "hostile-overview")
    names = page.evaluate("[...document.querySelectorAll('table.top-kernels td.name')]"
                          ".map(n => n.textContent)")
    assert HOSTILE_KERNEL in names and QUOTED_KERNEL in names
    assert page.evaluate("document.scripts.length") == 1  # the viewer's own
    (iteration,), = report_wh.rows("select distinct iteration from fct_rank_iterations "
                                   "where run_id = ? and rank = 0", [run])

    _show(page, f"{viewer}#/rank?{urlencode({'run': run, 'rank': 0, 'iteration': iteration})}",
          "rank", "document.querySelector('table.kernels')", "hostile-rank")
    page.click("document.getElementById('kernel-filter')")
    page.type_text(HOSTILE_KERNEL)
    page.wait_for("document.getElementById('kernel-count')?.textContent.endsWith('of 1 kernels')",
                  "the filtered kernels")
    assert page.evaluate("[...document.querySelectorAll('table.kernels td.name')]"
                         ".map(n => n.textContent)") == [HOSTILE_KERNEL]
    page.click("document.querySelector('table.kernels tbody tr')")
    _wait_view(page, "kernel", "document.querySelector('dl.kernel')", "hostile-kernel")
    assert page.evaluate("document.querySelector('h1').textContent") == HOSTILE_KERNEL
    assert page.evaluate("document.querySelector('h1').children.length") == 0
    assert page.evaluate("document.scripts.length") == 1


def test_every_run_overview_loads_cleanly(viewer: str, page: Chromium,
                                          report_wh: ReportWarehouse) -> None:
    """GPU, CPU-only, untimed, Nsight and real runs: each overview draws without a message."""
    for run in report_wh.runs:
        _show(page, f"{viewer}#/run?{urlencode({'run': run})}", "run",
              "document.querySelector('table.offenders') || document.querySelector('.note')",
              f"overview-{re.sub(r'[^a-z0-9_]', '_', run)}")
        assert page.evaluate("document.querySelector('h1').textContent") == run


def _view_urls(report_wh: ReportWarehouse, run: str) -> dict[str, str]:
    """A URL of each view that applies to ``run``, keyed by the view's name: its rank 0 (or
    first rank), its first iteration with a step, its longest kernel there."""
    (rank, iteration), = report_wh.rows(
        "select rank, iteration from fct_rank_iterations where run_id = ? "
        "and step_ns is not null order by rank, iteration nulls first limit 1", [run])
    kernel = report_wh.rows("select trace_id, slice_id from fct_kernels where run_id = ? "
                            "and rank = ? and iteration is not distinct from ? "
                            "order by dur_ns desc, slice_id limit 1", [run, rank, iteration])
    iteration = WHOLE_TRACE if iteration is None else iteration
    where = {"run": run}
    urls = {"run": where, "iteration": {**where, "iteration": iteration},
            "rank": {**where, "rank": rank, "iteration": iteration},
            "timeline": {**where, "ranks": f"{rank}"},
            "annotations": {**where, "rank": rank},
            "stragglers": {**where, "iteration": iteration}}
    if kernel:
        urls["kernel"] = {**where, "trace": kernel[0][0], "slice": kernel[0][1]}
    if report_wh.rows("select 1 from dim_ranks where run_id = ? and pp_group_index = 0 "
                      "and pp_stage > 0", [run]):
        urls["pipeline"] = {**where, "group": 0, "iteration": iteration}
    return {view: f"#/{view}?{urlencode(query)}" for view, query in urls.items()}


@pytest.mark.parametrize("run_name", ["sim_a", "dlrm_8rank", "tp1_pp4_dp2"])
def test_every_view_loads_on_simulated_and_shared_runs(viewer: str, page: Chromium,
                                                       report_wh: ReportWarehouse,
                                                       run_name: str) -> None:
    """Each view a run has (a simulated TP2 x PP2 run, the shared DLRM GPU trace, the shared
    CPU-only Megatron run) draws without an error or a console message; the simulated run is
    compared with its twin. A screenshot of each with TRACEHOUSE_SCREENSHOTS=DIR."""
    run = report_wh.need(run_name)
    urls = _view_urls(report_wh, run)
    if run_name == "sim_a":
        assert {"kernel", "pipeline"} <= urls.keys()
        urls["compare"] = f"#/compare?{urlencode({'run': run, 'other': report_wh.need('sim_b')})}"
    drawn = ("!document.querySelector('#view .error') && "
             "document.getElementById('view').childElementCount > 1")
    for view, url in urls.items():
        _show(page, f"{viewer}{url}", view, drawn, f"view-{run_name}-{view}")
        heading = page.evaluate("document.querySelector('#view h1, #view h2')?.textContent")
        assert heading, f"the {view} view of {run} has no heading"


def _findings_on_screen(page: Chromium) -> list[dict[str, object]]:
    """Each row of the "What to change" panel: its rule, title, severity, figures as
    ``column → [text, data-value]``, change, flags and link."""
    return page.evaluate("""[...document.querySelectorAll('table.findings tbody tr')].map(tr => ({
        rule: tr.dataset.rule, iteration: tr.dataset.iteration,
        title: tr.querySelector('.finding-title').textContent,
        severity: tr.querySelector('.severity').textContent,
        figures: Object.fromEntries([...tr.querySelectorAll('[data-column]')]
            .map(n => [n.dataset.column, [n.textContent, n.dataset.value]])),
        change: tr.querySelector('td.change div').textContent,
        flags: [...tr.querySelectorAll('.flags code')].map(c => c.textContent).join(' ') || null,
        view: tr.querySelector('a.finding-link')?.dataset.view ?? null}))""")


def test_the_run_opens_on_its_findings_ranked_as_fct_findings(viewer: str, page: Chromium,
                                                              report_wh: ReportWarehouse) -> None:
    """The overview's first section is "What to change": the rows `tracehouse findings --run`
    prints, in its order, with fct_findings' titles, sums and the worst iteration's figures
    against their thresholds; the rules not evaluated are listed with their reason."""
    run = report_wh.need("sim_a")
    _show(page, f"{viewer}#/run?{urlencode({'run': run})}", "run",
          "document.querySelector('#findings') && document.querySelector('#heatmap')",
          "findings-overview")
    assert page.evaluate("document.querySelector('#view section h2').textContent") \
        == "What to change"
    shown = _findings_on_screen(page)

    out = io.StringIO()
    assert print_findings(report_wh.root, run, fmt="json", out=out) == 0
    printed = json.loads(out.getvalue())
    assert len(printed) >= 3, "the simulated run should fire several rules"
    assert [row["rule"] for row in shown] == [row["rule_id"] for row in printed]
    fired = report_wh.rows("select rule_id, iteration, title, severity, time_at_stake_ns, "
                           "figure, threshold, fires_when, recommendation, megatron_flags "
                           "from fct_findings where run_id = ? and status = 'fired'", [run])
    for row, cli in zip(shown, printed, strict=True):
        mart = [r for r in fired if r[0] == row["rule"]]
        worst = min(mart, key=lambda r: (-r[4], r[1]))  # the most at stake, first iteration
        at_stake = sum(r[4] for r in mart)
        figures = row["figures"]
        assert int(figures["rank"][1]) == cli["rank"]
        assert row["title"] == worst[2]
        assert row["severity"] == cli["severity"] == max(
            (r[3] for r in mart), key=["low", "medium", "high"].index)
        assert figures["time_at_stake_ns"] == [ms(at_stake), str(at_stake)]
        assert cli["time_at_stake_ns"] == at_stake
        assert figures["share"][0] == pct(cli["share_of_run"])
        assert float(figures["share"][1]) == pytest.approx(cli["share_of_run"], rel=1e-12)
        assert int(row["iteration"]) == cli["worst_iteration"] == worst[1]
        for column, value in (("figure", worst[5]), ("threshold", worst[6])):
            assert figures[column][0] == figure_text(value)
            assert float(figures[column][1]) == pytest.approx(value, rel=1e-12)
            assert cli[column] == pytest.approx(value, rel=1e-12)
        assert (row["change"], row["flags"]) == (worst[8], worst[9])
    assert [row["view"] for row in shown] == [serve_view(cli["shown_in"]) for cli in printed]

    skipped = report_wh.rows("select rule_id, min(reason) from fct_findings where run_id = ? "
                             "and status = 'not_evaluated' group by 1 order by 1", [run])
    listed = page.evaluate("[...document.querySelectorAll('.not-evaluated li')]"
                           ".map(li => [li.dataset.rule, li.textContent])")
    assert [rule for rule, _ in listed] == [rule for rule, _ in skipped]
    assert all(text.endswith(reason) for (_, text), (_, reason) in zip(listed, skipped))


def test_a_findings_link_opens_the_view_it_names(viewer: str, page: Chromium,
                                                  report_wh: ReportWarehouse) -> None:
    """A click on each finding's link opens its view on the evidence: the pipeline on the
    finding's pp group and iteration, the timeline on its rank over its iteration's window."""
    run = report_wh.need("sim_a")
    overview = f"{viewer}#/run?{urlencode({'run': run})}"
    _show(page, overview, "run", "document.querySelector('#findings')", "findings-links")
    shown = _findings_on_screen(page)
    evidence = {(rule, iteration): (rank, group) for rule, iteration, rank, group in
                report_wh.rows("select rule_id, iteration, evidence_rank, "
                               "evidence_pp_group_index from fct_findings "
                               "where run_id = ? and status = 'fired'", [run])}
    (origin,), = report_wh.rows("select min(aligned_step_start_ns) from fct_rank_iterations "
                                "where run_id = ?", [run])
    assert {"pipeline", "timeline"} <= {row["view"] for row in shown}
    for index, row in enumerate(shown):
        if index:
            _show(page, overview, "run", "document.querySelector('#findings')", "findings-links")
        page.click(f"document.querySelectorAll('table.findings tbody tr')[{index}]"
                   ".querySelector('a.finding-link')")
        iteration = int(row["iteration"])
        if row["view"] == "pipeline":
            _wait_view(page, "pipeline", "document.querySelector('#pipeline')",
                       f"finding-{row['rule']}")
            group = evidence[row["rule"], iteration][1]
            assert page.evaluate("document.getElementById('pipeline-choice').value") \
                == f"{group}|{iteration}"
        elif row["view"] == "timeline":
            _wait_view(page, "timeline", "document.querySelector('#timeline')?.dataset.start",
                       f"finding-{row['rule']}")
            (start, end), = report_wh.rows(
                "select min(aligned_step_start_ns) - ?, max(aligned_step_start_ns + step_ns) - ? "
                "from fct_rank_iterations where run_id = ? and iteration = ? "
                "and step_ns is not null", [origin, origin, run, iteration])
            window = page.evaluate("[+document.getElementById('timeline').dataset.start,"
                                   " +document.getElementById('timeline').dataset.end]")
            assert window == [start, end]
            rank = evidence[row["rule"], iteration][0]
            if rank is not None:
                assert page.evaluate("document.getElementById('timeline-ranks').value") \
                    == str(rank)
        else:
            pytest.fail(f"no check for a link to the {row['view']} view")
