"""The report page: headline numbers, worst offenders, then each family's charts.

Why a separate module: :mod:`tracehouse.reports.report` decides *what* is
rendered and when; this module decides what a person reads, top to bottom.
Every number on the page is a column of a mart (models/marts/summary:
fct_run_summary, fct_rank_summary, fct_stage_summary,
fct_run_kernel_summary), never computed here nor from chart data: the
timing scope, the step rule, shares, medians and the peer rule live in the
models, and this module only picks rows (the worst offenders) and formats.
The page is a Jinja2 template (``templates/index.html.j2``) with autoescape
on, so every string that may come from a trace (run names, kernel names,
captions, error messages) is escaped by default.
The page is self-contained: inline CSS, no scripts, no web fonts, images
referenced by relative file name, so it opens offline and from any folder.
"""

from __future__ import annotations

import functools
import html
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
import markupsafe

from tracehouse.reports.files import publish_mode
from tracehouse.reports.findings import FindingsSection, gather_findings
from tracehouse.reports.kernel_names import unique_labels

if TYPE_CHECKING:
    import duckdb

    from tracehouse.reports.report import FamilySection

#: Kernels listed with their full names under the worst offenders.
TOP_KERNELS = 10


@dataclass(frozen=True)
class Figure:
    """One headline number: a label, its value as text, and what it means."""

    label: str
    value: str
    note: str = ""


@dataclass(frozen=True)
class Offender:
    """A worst offender: what it is worst at, who, by how much, and where to look."""

    what: str
    who: str
    figure: str
    note: str = ""
    anchor: str = ""


@dataclass
class Page:
    """Everything the page shows besides the charts."""

    run_id: str
    compare_run_id: str | None = None
    timing: str = "none"  # gpu | cpu | none
    layout: str = ""
    headline: list[Figure] = field(default_factory=list)
    offenders: list[Offender] = field(default_factory=list)
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: FindingsSection | None = None


# --------------------------------------------------------------------------- gathering


def _has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute("select count(*) from information_schema.tables where table_name = ?",
                      [table]).fetchone()
    return bool(row and row[0])


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    cursor = con.execute(sql, params)
    row = cursor.fetchone()
    names = [column[0] for column in cursor.description]
    return dict(zip(names, row)) if row else {}


def _all(con: duckdb.DuckDBPyConnection, sql: str,
         params: dict[str, Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds text (``—`` when unknown)."""
    return "—" if ns is None else f"{ns / 1e6:,.2f} ms"


def pct(ratio: float | None) -> str:
    """A ratio in [0, 1] as a percentage (``—`` when unknown)."""
    return "—" if ratio is None else f"{100 * ratio:.1f} %"


def pct_parts(ratios: Sequence[float | None]) -> list[str]:
    """Ratios that add up to 1 as percentages that add up to 100.0 as shown.

    Why not :func:`pct` each: five parts rounded to 0.1 % one by one can
    show 100.2 %. Largest remainder: every part is rounded down to 0.1 %, and
    the tenths still missing go to the parts with the largest remainders, so
    the cards add up exactly, each within 0.1 of its mart value.
    """
    if any(ratio is None for ratio in ratios):
        return [pct(ratio) for ratio in ratios]
    tenths = [1000 * float(ratio) for ratio in ratios]  # type: ignore[arg-type]
    floors = [int(t // 1) for t in tenths]
    missing = round(sum(tenths)) - sum(floors)
    by_remainder = sorted(range(len(tenths)), key=lambda i: (floors[i] - tenths[i], i))
    for index in by_remainder[:max(missing, 0)]:
        floors[index] += 1
    return [f"{value / 10:.1f} %" for value in floors]


def timing_source(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """``gpu`` (kernels), ``cpu`` (only CPU step frames) or ``none``: fct_run_summary's rule."""
    if not _has(con, "fct_run_summary"):
        return "none"
    row = con.execute("select timing_source from fct_run_summary where run_id = ?",
                      [run_id]).fetchone()
    return str(row[0]) if row else "none"


def rank_label(row: dict[str, Any]) -> str:
    """A rank named with its coordinates (``rank 3 · pp1 tp1 dp0``) when they are known."""
    label = f"rank {row['rank']}"
    coordinates = (row.get("pp_stage"), row.get("tp_rank"), row.get("dp_rank"))
    if all(value is not None for value in coordinates):
        label += " · pp{} tp{} dp{}".format(*coordinates)
    return label


def layout(run: dict[str, Any]) -> str:
    """``TP2 × PP2 × DP1`` from fct_run_summary's sizes (CP only when above 1); '' unknown."""
    if not run.get("pp_size"):
        return ""
    sizes = {name: run.get(f"{name}_size") for name in ("tp", "cp", "pp", "dp")}
    return " × ".join(f"{name.upper()}{size}" for name, size in sizes.items()
                      if size and (size > 1 or name in ("tp", "pp", "dp")))


def gather_page(con: duckdb.DuckDBPyConnection, run_id: str,
                compare_run_id: str | None = None) -> Page:
    """Headline numbers, worst offenders and top kernels of ``run_id``, from the marts."""
    page = Page(run_id=run_id, compare_run_id=compare_run_id)
    params = {"run": run_id}
    page.findings = gather_findings(con, run_id)
    run = _one(con, "select * from fct_run_summary where run_id = $run",
               params) if _has(con, "fct_run_summary") else {}
    page.timing = run.get("timing_source") or "none"
    page.layout = layout(run)
    ranks = _all(con, "select * from fct_rank_summary where run_id = $run order by rank",
                 params) if _has(con, "fct_rank_summary") else []
    stages = _all(con, "select * from fct_stage_summary where run_id = $run order by pp_stage",
                  params) if _has(con, "fct_stage_summary") else []
    for row in ranks:
        row["label"] = rank_label(row)

    if page.timing in ("gpu", "cpu"):
        _gather_timed(page, run, ranks, stages)
        if page.timing == "cpu":
            page.notes.append(
                "This run has no GPU kernels (a CPU-only capture): the numbers below come "
                "from Megatron's step frames on the CPU, not from kernels.")
    else:
        page.notes.append("This run has neither GPU kernels nor Megatron step frames in the "
                          "marts; only the topology is known.")
        if run.get("ranks"):
            page.headline.append(Figure("ranks", f"{run['ranks']:,}"))

    if run.get("bubble_rows"):
        page.headline.append(Figure(
            "pipeline bubble", pct(run["bubble_ratio"]),
            f"idle share of the pipeline groups' spans ({run['bubble_timing_sources']} "
            f"timings); theoretical (p−1)/(v·m+p−1) = {pct(run['theoretical_bubble_ratio'])}"))

    efficiency = _one(con, "select * from fct_run_efficiency where run_id = $run",
                      params) if _has(con, "fct_run_efficiency") else {}
    if efficiency.get("mfu") is not None:
        page.headline.append(_mfu(efficiency))

    if _has(con, "fct_run_kernel_summary"):
        page.top_kernels = _all(con, """
            select name, kind, calls, ranks, total_ns, share_ratio as share
            from fct_run_kernel_summary where run_id = $run
            order by total_ns desc, name
            limit $limit
        """, {**params, "limit": TOP_KERNELS})
    return page


#: The step's exclusive parts (fct_rank_iterations' step_part columns), as
#: the headline names them per timing source: (share column, label, note).
#: Parts a timing source cannot have (overlap and memory on the CPU, the
#: optimizer frame on the GPU) are left out; the shown ones add up to 100 %.
STEP_PARTS = {
    "gpu": (
        ("compute_share", "compute", "compute kernels running, no communication"),
        ("overlap_share", "compute ∥ communication",
         "communication hidden behind compute"),
        ("exposed_communication_share", "exposed communication",
         "communication kernels running, no compute"),
        ("exposed_memory_share", "exposed memory", "only memcpy/memset running"),
        ("idle_share", "rank idle", "no kernel on any stream"),
    ),
    "cpu": (
        ("compute_share", "forward + backward", "in forward/backward/recompute frames"),
        ("exposed_communication_share", "communication frames",
         "in pp_p2p and dp_sync frames (waiting included)"),
        ("optimizer_share", "optimizer", "in the optimizer step"),
        ("idle_share", "outside step frames", "in no classified Megatron frame"),
    ),
}

#: How each step rule cuts the step, for the headline's note.
STEP_RULES = {
    "gpu_projected_step": "GPU step: first kernel of a ProfilerStep to the first of the next",
    "gpu_projected_nvtx_marker": "GPU step: first kernel of an NVTX iteration range to the first "
                                 "of the next",
    "gpu_projected_gap_rule": "GPU step: nsys-ai's gap rule (a new iteration after a gap without "
                              "kernels), first kernel to the first of the next",
    "gpu_whole_trace": "no steps traced: each rank's first to last kernel",
    "profiler_step": "CPU step: the ProfilerStep range",
    "nvtx_marker": "CPU step: the NVTX iteration range",
    "gap_rule": "CPU step: nsys-ai's gap rule, first launch to the first of the next",
    "megatron_frames": "CPU step: first to last Megatron step frame",
}


def _gather_timed(page: Page, run: dict[str, Any], ranks: list[dict[str, Any]],
                  stages: list[dict[str, Any]]) -> None:
    """The headline and worst offenders of a timed run: every figure a mart column.

    The shares are the step's parts (fct_run_summary, ratios of sums), so
    they add up to 100 %; the straggler is fct_run_summary's (the rank whose
    late arrivals cost the others the most waiting, as fct_stragglers ranks
    it); "most compute against its peers" is a different question and is
    named so.
    """
    rule = STEP_RULES.get(run.get("step_rule") or "", "")
    page.headline += [
        Figure("ranks", f"{run['ranks']:,}", page.layout),
        Figure("iterations", f"{run['iterations'] or 0:,}",
               "whole traces (no steps traced)" if run.get("step_rule") == "gpu_whole_trace"
               else "traced iterations"),
        Figure("mean step time", ms(run["mean_step_ns"]),
               f"the slowest rank's step, averaged over iterations ({rule})"),
    ]
    parts = STEP_PARTS[page.timing]
    shown = pct_parts([run[column] for column, _label, _note in parts])
    page.headline += [Figure(label, value, f"{note}; share of the ranks' steps")
                      for (_column, label, note), value in zip(parts, shown)]
    if page.timing == "gpu":
        page.headline.append(Figure(
            "overlap ratio", pct(run["overlap_ratio"]),
            "communication overlapped by compute (HTA's comp_comm_overlap), not a share of "
            "the step"))
    page.offenders.append(_straggler(run, ranks))
    if ranks:
        page.offenders.append(_most_compute(ranks))
        worst = max(ranks, key=lambda r: (r["exposed_communication_ns"] or 0, -r["rank"]))
        label = ("communication frames (pp_p2p + dp_sync, CPU)" if page.timing == "cpu"
                 else "exposed communication")
        page.offenders.append(Offender(
            f"most {label}", worst["label"], ms(worst["exposed_communication_ns"]),
            "; ".join(part for part in (
                f"{pct(worst['exposed_communication_share'])} of its step time",
                _versus(worst["exposed_communication_vs_median"])) if part),
            "family-heatmaps"))
    _stage_offender(page, stages, "mean compute per rank and iteration")


def _mfu(efficiency: dict[str, Any]) -> Figure:
    """The run's MFU (fct_run_efficiency.mfu), shown where its model config is known.

    The mart's figure as it stands: Megatron's model FLOPs of the run's
    iterations over their steps x the world size x the GPU's dense peak for
    the training dtype (a ratio of sums); the note names what it is measured
    against, so that a reader can tell a low MFU from a wrong peak.
    """
    dtype = str(efficiency.get("params_dtype") or "").removeprefix("torch.")
    return Figure(
        "MFU", pct(efficiency["mfu"]),
        f"model FLOPs (Megatron's formula, the run's model_config.json): "
        f"{efficiency['achieved_tflops_per_gpu']:,.1f} TFLOP/s per GPU against the "
        f"{efficiency['gpu_product']} {dtype} peak of {efficiency['peak_tflops']:,.1f}, "
        f"over {efficiency['iterations']} iteration(s)")


def _straggler(run: dict[str, Any], ranks: list[dict[str, Any]]) -> Offender:
    """The run's straggler (fct_run_summary.straggler_rank), or why there is none."""
    if run.get("straggler_rank") is None:
        return Offender("straggler", "none", "—",
                        "no rank made another wait in a matched collective (one rank, no "
                        "matched collectives, or all arriving together)", "family-stragglers")
    by_rank = {row["rank"]: row for row in ranks}
    who = by_rank.get(run["straggler_rank"], {"rank": run["straggler_rank"]})
    return Offender("straggler (caused the most waiting)", rank_label(who),
                    ms(run["straggler_wait_caused_ns"]),
                    "waiting its late arrivals cost the other ranks over the run "
                    "(fct_stragglers)", "family-stragglers")


def _most_compute(ranks: list[dict[str, Any]]) -> Offender:
    """The rank with the most compute *compared with its peers* (fct_rank_summary.compute_vs_peers).

    Why against peers: the last pipeline stage (loss, output layer) and the
    first (embedding) do more work by design. Who its peers are is the
    mart's rule (peer_group); here only the choice and the wording. It is a
    candidate cause, not the straggler (who made the others wait).
    """
    slow = max(ranks, key=lambda r: (r["compute_vs_peers"] or 0.0, -r["rank"]))
    by_stage = slow["peer_group"] == "pp_stage"
    note = "; ".join(part for part in (
        f"{slow['compute_vs_peers'] or 0.0:.2f}× the median of its stage's "
        f"{slow['stage_ranks']} ranks" if by_stage else "",
        _versus(slow["compute_vs_median"])) if part)
    what = ("most compute per iteration against its pipeline stage" if by_stage
            else "most compute per iteration against the other ranks")
    return Offender(what, slow["label"], ms(slow["compute_ns"]), note, "family-heatmaps")


def _stage_offender(page: Page, stages: list[dict[str, Any]], measure: str) -> None:
    if not stages:
        page.offenders.append(Offender("slowest pipeline stage", "—", "—",
                                       "no pipeline stages known for this run (dim_ranks)"))
        return
    slow = max(stages, key=lambda s: (s["compute_ns"] or 0, -s["pp_stage"]))
    note = f"{measure}; {slow['ranks']} rank(s)"
    if slow["compute_vs_other_stages"] is not None:
        note += f"; {slow['compute_vs_other_stages']:.2f}× the other stages' mean"
    page.offenders.append(Offender("slowest pipeline stage", f"stage {slow['pp_stage']}",
                                   ms(slow["compute_ns"]), note, "family-pipeline"))


def _versus(ratio: float | None) -> str:
    """``1.50× the median rank`` from a mart's *_vs_median column ('' when unknown)."""
    return "" if ratio is None else f"{ratio:.2f}× the median rank"


# --------------------------------------------------------------------------- writing

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;
 color:#1d232a;background:#fff;margin:0}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:21px;margin:40px 0 6px;
 border-bottom:2px solid #e3e7ec;padding-bottom:4px}h3{font-size:16px;margin:22px 0 6px}
.meta{color:#5b6670;font-size:13px;margin:0 0 18px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(205px,1fr));gap:10px}
.card{border:1px solid #e3e7ec;border-radius:8px;padding:10px 12px;background:#f8fafc}
.card .label{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#5b6670}
.card .value{font-size:22px;font-weight:600;margin:2px 0}
.card .sub{font-size:12px;color:#5b6670}
table{border-collapse:collapse;width:100%;font-size:14px;margin:6px 0}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e3e7ec;vertical-align:top}
th{background:#f1f4f7;font-weight:600}td.num{text-align:right;white-space:nowrap}
code{font:12.5px/1.3 ui-monospace,'DejaVu Sans Mono',monospace;word-break:break-all;
 white-space:pre-wrap}
td.finding{min-width:11em}
code.rule{font-size:11px;color:#5b6670;word-break:normal;white-space:nowrap}
.note{background:#fff8e1;border-left:4px solid #f2c12e;padding:8px 12px;margin:12px 0}
.fail{background:#fdecea;border-left:4px solid #d64550;padding:8px 12px;margin:12px 0}
.empty{color:#5b6670;font-style:italic}
nav ol{columns:2;font-size:14px}
figure{margin:10px 0 26px}figure img{max-width:100%;height:auto;border:1px solid #eef1f4}
figcaption{font-size:13.5px;color:#39424b;margin-top:4px}
details summary{font-size:12px;color:#5b6670;cursor:pointer}
a{color:#1f5fa8}
"""


#: Where the page's Jinja2 template lives (shipped as package data).
TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "index.html.j2"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """The template environment: autoescape on, unknown names an error, tidy whitespace.

    Why a template with autoescape rather than hand-placed ``html.escape``
    calls: escaping is then the default for every value, so a new field that
    carries a trace string cannot be forgotten; only :data:`_CSS` is marked
    safe, and it is ours.
    """
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}``: None shows as nothing, text is escaped as :func:`html.escape` does.

    Autoescape would escape it anyway (markupsafe spells quotes ``&#34;``);
    escaping here first keeps the page's established spelling (``&quot;``,
    ``&#x27;``), which readers and tests of the page already rely on.
    """
    if value is None:
        return ""
    if isinstance(value, markupsafe.Markup):
        return value
    return markupsafe.Markup(html.escape(str(value), quote=True))


def _src(path: Path) -> str:
    """Relative, URL-quoted reference to a file next to index.html (escaped by the template)."""
    return quote(path.name)


def render_html(page: Page, sections: Sequence[FamilySection], generated_at: str,
                fingerprint: str) -> str:
    """The whole page as a string, from ``templates/index.html.j2``; every value escaped."""
    labels = unique_labels([str(k["name"]) for k in page.top_kernels])
    kernels = [
        {"name": str(k["name"]), "label": labels[str(k["name"])], "kind": k["kind"],
         "total": ms(k["total_ns"]), "share": pct(k["share"]),
         "calls": f"{int(k['calls']):,}", "ranks": f"{int(k['ranks']):,}"}
        for k in page.top_kernels
    ]
    shown = []
    for section in sections:
        count = len(section.charts)
        shown.append({
            "name": section.name,
            "title": section.title,
            "error": section.error,
            "state": "failed" if section.error else f"{count} chart{'s' if count != 1 else ''}",
            "why_empty": getattr(section, "note", None) or _why_empty(section.name, page),
            "charts": [{"slug": chart.slug, "title": chart.title, "caption": chart.caption,
                        "png_src": _src(chart.png), "svg_src": _src(chart.svg)}
                       for chart in section.charts],
        })
    timing = {"gpu": "GPU kernels", "cpu": "CPU step frames"}.get(page.timing, "nothing")
    return _environment().get_template(TEMPLATE).render(
        page=page,
        css=markupsafe.Markup(_CSS),
        timing=timing,
        generated_at=generated_at,
        fingerprint=fingerprint,
        failed=[s for s in sections if s.error is not None],
        anchors={f"family-{s.name}" for s in sections if s.charts},
        kernels=kernels,
        sections=shown,
    )


def _why_empty(name: str, page: Page) -> str:
    if name == "compare" and not page.compare_run_id:
        return "No comparison run: pass --compare RUN to put a second run side by side."
    if page.timing == "cpu":
        return "Nothing to show: this family needs data this CPU-only run does not have."
    return "Nothing to show for this run (the marts this family reads have no rows for it)."


def write_index(path: Path, page: Page, sections: Sequence[FamilySection], generated_at: str,
                fingerprint: str) -> None:
    """Write ``index.html`` atomically (temporary file in the same folder, then rename)."""
    text = render_html(page, sections, generated_at, fingerprint)
    fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".html", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        publish_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
