"""The report driver and its page: render_report and index.html.

Checked on a warehouse built by the real ingest and dbt (see
``report_warehouse.py``): the page references every chart it wrote and
nothing else; its headline numbers are the marts' numbers; trace strings
(a kernel named ``<script>alert(1)</script>``, quotes, ampersands) come out
as text; re-running swaps the whole folder in atomically and never leaves a
half-written report; unchanged marts skip the work; a family that fails is
reported while the others still render.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from report_warehouse import HOSTILE_KERNEL, QUOTED_KERNEL, ReportWarehouse
from tracehouse.core.warehouse import Warehouse
from tracehouse.reports import heatmaps, html, report
from tracehouse.reports.report import ReportError, render_report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wh(report_wh: ReportWarehouse) -> ReportWarehouse:
    """The session's report warehouse (conftest), read-only."""
    return report_wh


class Page(HTMLParser):
    """What a browser would show: text, script elements, image and link targets."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.scripts = 0
        self.images: list[str] = []
        self.links: list[str] = []
        self.feed(source)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "img" and values.get("src"):
            self.images.append(values["src"] or "")
        if tag in ("a", "link") and values.get("href"):
            self.links.append(values["href"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def shown(self) -> str:
        return "".join(self.text)


def _render(wh: ReportWarehouse, out: Path, run: str, **kwargs: object) -> report.ReportResult:
    stream = io.StringIO()
    result = render_report(wh.root, out, run_id=wh.need(run), stream=stream, **kwargs)
    result.log = stream.getvalue()  # type: ignore[attr-defined]
    return result


def _first_row(wh: ReportWarehouse, sql: str,
               params: list[object] | dict[str, object]) -> tuple | None:
    """The first row of ``sql`` (None without one)."""
    return next(iter(wh.rows(sql, params)), None)


# --------------------------------------------------------------------------- the page


def test_index_references_every_chart_and_nothing_missing(wh: ReportWarehouse,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = _render(wh, out, "sim_a")
    assert result.failures == [] or all(f.family not in ("heatmaps", "kernels", "comm_groups",
                                                         "compare") for f in result.failures)
    page = Page(result.index_html.read_text())
    assert page.scripts == 0
    written = {p.name for p in out.iterdir() if p.suffix in (".png", ".svg")}
    assert written, "no charts were written"
    referenced = {src for src in page.images + page.links if "://" not in src
                  and not src.startswith(("#", "data:"))}
    assert {name for name in written if name.endswith(".png")} <= set(page.images)
    assert written <= referenced
    assert all((out / src).is_file() for src in referenced)
    assert {c.png.name for c in result.charts} | {c.svg.name for c in result.charts} == written
    # One progress line per registered family, then a summary line.
    assert len(re.findall(r"^\[\d+/\d+\] ", result.log, flags=re.M)) == len(result.sections)


def _cards(source: str) -> dict[str, tuple[str, str]]:
    """The headline cards as label -> (value, note), as the page shows them."""
    cards = re.findall(r'<div class="card"><div class="label">(.*?)</div>'
                       r'<div class="value">(.*?)</div><div class="sub">(.*?)</div>', source)
    return {unescape(label): (unescape(value), unescape(note)) for label, value, note in cards}


def _shown_shares(cards: dict[str, tuple[str, str]]) -> dict[str, float]:
    return {label: float(value.rstrip(" %")) for label, (value, note) in cards.items()
            if "share of the ranks' steps" in note}


PARTS = ("compute", "overlap", "exposed_communication", "exposed_memory", "optimizer", "idle")


def _independent_run(wh: ReportWarehouse, run: str) -> dict[str, object]:
    """The run's headline figures recomputed from fct_rank_iterations and fct_stragglers."""
    row = _first_row(wh, f"""
        select {", ".join(f"sum(step_{p}_ns) / sum(step_ns)" for p in PARTS)},
               sum(overlap_ns) / sum(communication_ns),
               (select avg(step_ns) from (
                    select max(step_ns) as step_ns from fct_rank_iterations
                    where run_id = $run and step_ns is not null group by iteration)),
               count(distinct iteration)
        from fct_rank_iterations where run_id = $run and step_ns is not null
    """, {"run": run})
    straggler = _first_row(wh, """
        select rank, sum(wait_caused_ns) from fct_stragglers where run_id = ?
        group by rank having sum(wait_caused_ns) > 0
        order by sum(wait_caused_ns) desc, sum(times_last) desc, rank limit 1""", [run])
    return {**dict(zip(PARTS, row[:6])), "overlap_ratio": row[6], "step": row[7],
            "iterations": row[8], "straggler": straggler}


def _names_straggler(shown: str, rank: int, caused_ns: int) -> bool:
    """The offenders table's straggler row names ``rank`` and the waiting it caused."""
    return re.search(rf"straggler \(caused the most waiting\)rank {rank}(?: · [^\n]*?)?"
                     + re.escape(f"{caused_ns / 1e6:,.2f} ms"), shown) is not None


def test_headline_numbers_are_the_marts_numbers(wh: ReportWarehouse, tmp_path: Path) -> None:
    run = wh.need("sim_a")
    result = _render(wh, tmp_path / "report", run)
    source = result.index_html.read_text()
    shown = Page(source).shown
    cards = _cards(source)
    want = _independent_run(wh, run)
    assert cards["mean step time"][0] == f"{want['step'] / 1e6:,.2f} ms"
    assert cards["iterations"][0] == f"{want['iterations']}"
    assert cards["overlap ratio"][0] == f"{100 * want['overlap_ratio']:.1f} %"
    labels = {"compute": "compute", "compute ∥ communication": "overlap",
              "exposed communication": "exposed_communication",
              "exposed memory": "exposed_memory", "rank idle": "idle"}
    shares = _shown_shares(cards)
    assert set(shares) == set(labels)
    for label, part in labels.items():
        assert shares[label] == pytest.approx(100 * want[part], abs=0.1), label
    assert sum(shares.values()) == pytest.approx(100.0, abs=1e-9)
    # The straggler: fct_stragglers' rank with the most waiting caused over the run.
    straggler, caused = want["straggler"]
    assert _names_straggler(shown, straggler, caused)
    # Most compute against its stage peers: the simulator's slow rank 1 (compute x1.5),
    # named as what it is, not as the straggler.
    slow_rank, slow_ns, stage_ratio, peers = _first_row(wh, """
        with per_rank as (
            select rank, pp_stage, avg(step_compute_ns + step_overlap_ns) as compute_ns
            from fct_rank_iterations where run_id = ? and step_ns is not null
            group by rank, pp_stage
        )
        select rank, compute_ns, compute_ns / median(compute_ns) over (partition by pp_stage),
               count(*) over (partition by pp_stage)
        from per_rank
        order by compute_ns / median(compute_ns) over (partition by pp_stage) desc, rank limit 1
    """, [run])
    assert slow_rank == 1
    assert re.search(rf"most compute per iteration against its pipeline stage[^\n]*?"
                     rf"rank {slow_rank}\b", shown)
    assert f"{slow_ns / 1e6:,.2f} ms" in shown
    assert f"{stage_ratio:.2f}× the median of its stage's {peers} ranks" in shown
    assert "slowest rank (" not in shown
    # The simulator writes model_config.json: the MFU card is fct_run_efficiency's.
    _assert_mfu_card_is_the_marts(wh, run, cards)


def _assert_mfu_card_is_the_marts(wh: ReportWarehouse, run: str,
                                  cards: dict[str, tuple[str, str]]) -> None:
    """The MFU card shows fct_run_efficiency.mfu, which is the run's model FLOPs over
    its iterations' steps x world x peak (recomputed from fct_iteration_efficiency)."""
    [(mfu, achieved)] = wh.rows("""
        select mfu, achieved_tflops_per_gpu from fct_run_efficiency where run_id = ?
    """, [run])
    [(recomputed,)] = wh.rows("""
        select sum(model_flops_per_iteration) / sum(step_ns * 1e3 * world_size * peak_tflops)
        from fct_iteration_efficiency where run_id = ?
    """, [run])
    assert mfu == pytest.approx(recomputed, rel=1e-9) and 0 < mfu < 1
    assert cards["MFU"][0] == f"{100 * mfu:.1f} %"
    assert f"{achieved:,.1f} TFLOP/s per GPU" in cards["MFU"][1]


@pytest.mark.parametrize("run", ["tp1_pp4_dp2", "dlrm_8rank", "nsys_h100"])
def test_headline_shares_add_up_on_every_kind_of_run(wh: ReportWarehouse, tmp_path: Path,
                                                     run: str) -> None:
    """CPU-timed, GPU-timed and Nsight runs: the shares shown are the step's parts, 100 %."""
    run = wh.need(run)
    result = _render(wh, tmp_path / "report", run)
    source = result.index_html.read_text()
    cards = _cards(source)
    want = _independent_run(wh, run)
    shares = _shown_shares(cards)
    assert len(shares) >= 4
    assert sum(shares.values()) == pytest.approx(100.0, abs=1e-9)
    assert cards["mean step time"][0] == f"{want['step'] / 1e6:,.2f} ms"
    assert "MFU" not in cards  # no model_config.json in these runs
    shown = Page(source).shown
    if want["straggler"] is None:
        assert re.search(r"straggler\s*none", shown)
    else:
        assert _names_straggler(shown, *want["straggler"])


def test_report_and_compare_name_the_same_slowest_rank_and_straggler(
        wh: ReportWarehouse, tmp_path: Path) -> None:
    """The heatmap caption's worst step, compare's rows and the page agree, per iteration."""
    import json
    import subprocess
    import sys

    # As a user runs it, in its own process: an in-process connection another test
    # module keeps open to this database would share DuckDB's instance with it.
    tracehouse = Path(sys.executable).with_name("tracehouse")
    compared = subprocess.run(
        [str(tracehouse), "compare", "sim_a", "sim_b", "--warehouse", str(wh.root),
         "--format", "json"], capture_output=True, text=True, timeout=120, check=True)
    rows = json.loads(compared.stdout)
    iterations = {r[0]: r[1:] for r in wh.rows("""
        select iteration, slowest_rank, straggler_rank, step_ns from fct_iteration_summary
        where run_id = 'sim_a' order by iteration""")}
    for row in rows[:-1]:
        slowest, straggler, _step = iterations[row["iter A"]]
        assert (row["slowest rank A"], row["straggler A"]) == (slowest, straggler)
    [run_row] = rows[-1:]
    (run_straggler,) = _first_row(wh, "select straggler_rank from fct_run_summary "
                                  "where run_id = 'sim_a'", [])
    assert run_row["straggler A"] == run_straggler
    result = _render(wh, tmp_path / "report", "sim_a")
    [heatmap] = [c for c in result.charts if c.slug == "heatmaps-rank-iteration"]
    match = re.search(r"step time: [^;]*?worst rank (\d+) at iteration (\d+) \(([\d.]+) ms\)",
                      heatmap.caption)
    assert match, heatmap.caption
    rank, iteration, ms = int(match[1]), int(match[2]), float(match[3])
    worst_iteration = max(iterations, key=lambda it: (iterations[it][2], -it))
    assert (rank, iteration) == (iterations[worst_iteration][0], worst_iteration)
    assert ms == pytest.approx(iterations[worst_iteration][2] / 1e6, abs=0.005)


def test_cpu_only_run_gets_a_useful_report(wh: ReportWarehouse, tmp_path: Path) -> None:
    run = wh.need("tp1_pp4_dp2")
    result = _render(wh, tmp_path / "report", run)
    mine = [f for f in result.failures if f.family in ("heatmaps", "kernels", "comm_groups",
                                                       "compare")]
    assert mine == []
    shown = Page(result.index_html.read_text()).shown
    assert "CPU" in shown and "no GPU kernels" in shown
    (step,) = _first_row(wh, """
        select avg(step_ns) from (
            select iteration, max(step_ns) as step_ns from fct_rank_iterations
            where run_id = ? and step_ns is not null group by iteration)
    """, [run])
    assert f"{step / 1e6:,.2f} ms" in shown
    assert "slowest pipeline stage" in shown
    assert any(c.slug == "heatmaps-rank-iteration" for c in result.charts)


def test_run_without_timings_says_so_and_still_counts_its_ranks(wh: ReportWarehouse,
                                                                tmp_path: Path) -> None:
    """Neither kernels nor step frames: fct_run_summary says `none`, the page says why."""
    run = wh.need("cpu_ops")
    result = _render(wh, tmp_path / "report", run)
    shown = Page(result.index_html.read_text()).shown
    timing, ranks, step = _first_row(wh, "select timing_source, ranks, mean_step_ns "
                                     "from fct_run_summary where run_id = ?", [run])
    assert (timing, ranks, step) == ("none", 2, None)
    assert "neither GPU kernels nor Megatron step frames" in shown
    assert "ranks2" in re.sub(r"\s+", "", shown).lower()
    assert "slowest rank" not in shown and "mean step time" not in shown.lower()


def test_hostile_names_render_as_text(wh: ReportWarehouse, tmp_path: Path) -> None:
    result = _render(wh, tmp_path / "report", "hostile")
    source = result.index_html.read_text()
    page = Page(source)
    assert page.scripts == 0
    assert HOSTILE_KERNEL in page.shown
    assert QUOTED_KERNEL in page.shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in source
    assert "&quot;a&quot; &amp; &#x27;b&#x27;" in source
    for svg in tmp_path.glob("report/*.svg"):
        assert "<script" not in svg.read_text()


def test_every_page_field_is_escaped_by_the_template(tmp_path: Path) -> None:
    """The page is a Jinja2 template with autoescape on: no field can slip out raw."""
    hostile = '<script>alert("x")</script>'
    png, svg = tmp_path / f"{hostile}.png", tmp_path / f"{hostile}.svg"
    page = html.Page(run_id=hostile, compare_run_id=hostile, layout=hostile, notes=[hostile],
                     headline=[html.Figure(hostile, hostile, hostile)],
                     offenders=[html.Offender(hostile, hostile, hostile, hostile, hostile)],
                     top_kernels=[{"name": hostile, "kind": hostile, "total_ns": 1.0,
                                   "share": 1.0, "calls": 1, "ranks": 1}])
    sections = [
        report.FamilySection(name=hostile, title=hostile, error=hostile),
        report.FamilySection(name="empty", title=hostile, note=hostile),
        report.FamilySection(name="drawn", title=hostile, charts=[
            report.RenderedChart(slug=hostile, title=hostile, caption=hostile, png=png,
                                 svg=svg)]),
    ]
    source = html.render_html(page, sections, generated_at=hostile, fingerprint=hostile)
    shown = Page(source)
    assert shown.scripts == 0 and "<script" not in source
    assert shown.shown.count(hostile) >= 14
    assert 'href="#family-&lt;script&gt;alert(&quot;x&quot;)' in source  # attributes too
    assert html._environment().autoescape is True


def test_page_is_self_contained(wh: ReportWarehouse, tmp_path: Path) -> None:
    source = _render(wh, tmp_path / "report", "sim_a").index_html.read_text()
    assert "http://" not in source and "https://" not in source
    assert "<link rel=\"stylesheet\"" not in source and "@import" not in source
    assert "<style>" in source


def test_report_files_follow_the_umask(wh: ReportWarehouse, tmp_path: Path) -> None:
    """PNG and SVG used to be 0600 (mkstemp) beside a 0644 index.html: broken images for others."""
    mask = 0o027  # not the usual 0o022, so a hard-coded 0644 would fail too
    previous = os.umask(mask)
    try:
        result = _render(wh, tmp_path / "report", "hostile")
    finally:
        os.umask(previous)
    out = result.index_html.parent
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in out.iterdir()}
    assert {".png", ".svg", ".html", ".json"} <= {Path(name).suffix for name in modes}
    assert {name: mode for name, mode in modes.items() if mode != 0o666 & ~mask} == {}


def test_a_family_with_nothing_truthful_to_draw_says_why(wh: ReportWarehouse,
                                                         tmp_path: Path) -> None:
    """DLRM's communication has no known group: the page explains, no 'unknown' bar."""
    result = _render(wh, tmp_path / "report", "dlrm_8rank")
    section = next(s for s in result.sections if s.name == "comm_groups")
    assert section.charts == [] and section.error is None
    assert "no process-group args" in (section.note or "")
    shown = Page(result.index_html.read_text()).shown
    assert "no process-group args" in shown
    assert not list((tmp_path / "report").glob("comm-groups*"))
    assert "comm_groups: nothing to show for this run (" in result.log
    again = _render(wh, tmp_path / "report", "dlrm_8rank")  # the note survives a skipped re-run
    assert next(s for s in again.sections if s.name == "comm_groups").note == section.note


# --------------------------------------------------------------------------- re-runs


def test_rerun_swaps_the_whole_folder_atomically(wh: ReportWarehouse, tmp_path: Path) -> None:
    out = tmp_path / "report"
    _render(wh, out, "sim_a")
    stale = out / "stale-chart.png"
    stale.write_bytes(b"old")
    again = _render(wh, out, "sim_a", force=True)
    assert not stale.exists(), "the old folder was not replaced as a whole"
    assert again.index_html.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["report"], "temporary folders left behind"


def test_a_crash_mid_render_keeps_the_previous_report(wh: ReportWarehouse, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report"
    _render(wh, out, "sim_a")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(html, "write_index", crash)
    with pytest.raises(OSError, match="disk full"):
        _render(wh, out, "sim_a", force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


def test_unchanged_marts_skip_and_changed_marts_rerender_only_their_families(
        wh: ReportWarehouse, tmp_path: Path) -> None:
    # A private copy of the warehouse, so one mart can be changed.
    root = tmp_path / "warehouse"
    root.mkdir()
    shutil.copy2(Warehouse(wh.root).database, Warehouse(root).database)
    private = ReportWarehouse(root=root, runs=wh.runs)
    out = tmp_path / "report"
    first = _render(private, out, "sim_a")
    index_bytes = first.index_html.read_bytes()

    second = _render(private, out, "sim_a")
    assert second.skipped
    assert "up to date" in second.log and "nothing re-rendered" in second.log
    assert second.index_html.read_bytes() == index_bytes
    assert [c.slug for c in second.charts] == [c.slug for c in first.charts]

    con = duckdb.connect(str(Warehouse(root).database))
    con.execute("update fct_kernel_summary set total_dur_ns = total_dur_ns + 1 "
                "where run_id = 'sim_a'")
    con.close()
    third = _render(private, out, "sim_a")
    assert not third.skipped
    assert re.search(r"kernels: \d+ chart\(s\) in", third.log), third.log
    assert re.search(r"heatmaps: marts unchanged, kept 1 chart", third.log), third.log
    assert all(c.png.is_file() for c in third.charts)

    forced = _render(private, out, "sim_a", force=True)
    assert not forced.skipped and "marts unchanged" not in forced.log


# --------------------------------------------------------------------------- failures


def test_a_failing_family_is_reported_and_the_others_render(
        wh: ReportWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: object) -> list:
        raise RuntimeError("heatmaps exploded <b>")

    monkeypatch.setattr(heatmaps.FAMILY, "render", boom)
    monkeypatch.setattr(report, "FAMILY_MODULES",
                        (*report.FAMILY_MODULES, "tracehouse.reports.no_such_family"))
    result = _render(wh, tmp_path / "report", "sim_a")
    failed = {f.family: f.error for f in result.failures}
    assert failed["heatmaps"] == "RuntimeError: heatmaps exploded <b>"
    assert "no_such_family" in failed
    assert "heatmaps: FAILED — RuntimeError: heatmaps exploded <b>" in result.log
    assert any(c.slug.startswith("kernels") for c in result.charts)
    source = result.index_html.read_text()
    assert "heatmaps exploded &lt;b&gt;" in source
    assert not any(p.name.startswith("heatmaps") for p in (tmp_path / "report").iterdir())


def test_errors_say_what_to_run(wh: ReportWarehouse, tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="tracehouse build"):
        render_report(tmp_path / "nowhere", tmp_path / "r", stream=io.StringIO())
    with pytest.raises(ReportError, match=r"unknown run 'nope'.*sim_a"):
        render_report(wh.root, tmp_path / "r", run_id="nope", stream=io.StringIO())
    with pytest.raises(ReportError, match=r"unknown comparison run"):
        render_report(wh.root, tmp_path / "r", run_id="sim_a", compare_run_id="nope",
                      stream=io.StringIO())
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("do not delete")
    with pytest.raises(ReportError, match="not a tracehouse report"):
        render_report(wh.root, precious, run_id="sim_a", stream=io.StringIO())
    assert (precious / "thesis.tex").read_text() == "do not delete"


def test_without_a_run_the_newest_is_chosen_and_named(wh: ReportWarehouse,
                                                      tmp_path: Path) -> None:
    stream = io.StringIO()
    result = render_report(wh.root, tmp_path / "report", stream=stream)
    newest = _first_row(wh, """
        select run_id from (
            select run_id, last_end_ns from fct_rank_iterations
            union all select run_id, last_end_ns from fct_microbatch_phases)
        group by run_id order by max(last_end_ns) desc limit 1
    """, [])[0]
    assert result.run_id == newest
    assert f"reporting run {newest}, the newest" in stream.getvalue()


def test_default_folder_is_under_the_warehouse(wh: ReportWarehouse, tmp_path: Path) -> None:
    root = tmp_path / "warehouse"
    root.mkdir()
    shutil.copy2(Warehouse(wh.root).database, Warehouse(root).database)
    result = render_report(root, None, run_id="hostile", stream=io.StringIO())
    assert result.out_dir == Warehouse(root).reports / "hostile"
    assert result.index_html.is_file()


def test_compare_section_renders_with_a_second_run(wh: ReportWarehouse, tmp_path: Path) -> None:
    result = _render(wh, tmp_path / "report", "sim_a", compare_run_id=wh.need("sim_b"))
    slugs = [c.slug for c in result.charts]
    assert "compare-step-time" in slugs and "compare-breakdown" in slugs
    assert "compared with" in Page(result.index_html.read_text()).shown
