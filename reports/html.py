"""The report page: headline numbers, worst offenders, then each family's charts.

Why a separate module: :mod:`tracehouse.reports.report` decides *what* is
rendered and when; this module decides what a person reads, top to bottom.
Every number on the page is SQL over the marts (never recomputed from chart
data). The page is a Jinja2 template (``templates/index.html.j2``) with
autoescape on, so every string that may come from a trace (run names,
kernel names, captions, error messages) is escaped by default.
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
from tracehouse.reports.kernels import unique_labels

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


#: The run's GPU rank-iterations: traced iterations only, unless the run has
#: none (then the rows of kernels outside every step are all there is).
#: step_ns is the GPU step of fct_rank_steps (first kernel of step N to first
#: kernel of step N+1: steps tile the GPU timeline), not span_ns, whose
#: iterations overlap when the GPU runs behind the CPU.
GPU_SCOPE_SQL = """
    scoped as (
        select
            iterations.*,
            coalesce(steps.gpu_step_ns, iterations.span_ns) as step_ns
        from fct_rank_iterations as iterations
        left join fct_rank_steps as steps
            on steps.run_id = iterations.run_id and steps.rank = iterations.rank
            and steps.iteration = iterations.iteration
        where iterations.run_id = $run
            and (
                iterations.iteration is not null
                or not exists (
                    select 1 from fct_rank_iterations
                    where run_id = $run and iteration is not null
                )
            )
    )
"""

#: The run's CPU-only rank-iterations from Megatron's step frames: step =
#: first frame start to last frame end; compute = forward/backward/recompute
#: frames; communication frames = pp_p2p and dp_sync.
CPU_SCOPE_SQL = """
    scoped as (
        select
            rank,
            iteration,
            max(last_end_ns) - min(first_start_ns) as step_ns,
            coalesce(sum(busy_ns) filter (
                where phase in ('forward', 'backward', 'recompute')), 0) as compute_ns,
            coalesce(sum(busy_ns) filter (where phase in ('pp_p2p', 'dp_sync')), 0) as comm_ns,
            coalesce(sum(busy_ns) filter (where phase = 'optimizer'), 0) as optimizer_ns
        from fct_microbatch_phases
        where run_id = $run and timing_source = 'cpu'
        group by rank, iteration
    )
"""


def timing_source(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """``gpu`` when the run has kernel marts, ``cpu`` when only CPU step frames, else ``none``."""
    if _has(con, "fct_rank_iterations") and con.execute(
            "select count(*) from fct_rank_iterations where run_id = ?", [run_id]).fetchone()[0]:
        return "gpu"
    if _has(con, "fct_microbatch_phases") and con.execute(
            "select count(*) from fct_microbatch_phases where run_id = ? and timing_source = 'cpu'",
            [run_id]).fetchone()[0]:
        return "cpu"
    return "none"


def rank_label_sql() -> str:
    """SQL expression (over ``per_rank`` and dim_ranks ``d``) naming a rank with its coordinates."""
    return ("'rank ' || per_rank.rank || coalesce(' · pp' || d.pp_stage || ' tp' || d.tp_rank"
            " || ' dp' || d.dp_rank, '')")


def gather_page(con: duckdb.DuckDBPyConnection, run_id: str,
                compare_run_id: str | None = None) -> Page:
    """Headline numbers, worst offenders and top kernels of ``run_id``, from the marts."""
    page = Page(run_id=run_id, compare_run_id=compare_run_id)
    page.timing = timing_source(con, run_id)
    params = {"run": run_id}
    ranks = _one(con, """
        select
            count(*) as ranks,
            max(tp_rank) + 1 as tp, max(pp_stage) + 1 as pp, max(dp_rank) + 1 as dp,
            max(cp_rank) + 1 as cp
        from dim_ranks where run_id = $run and coalesce(has_trace, true)
    """, params) if _has(con, "dim_ranks") else {}
    if ranks.get("pp"):
        dims = [f"{name.upper()}{ranks[name]}" for name in ("tp", "cp", "pp", "dp")
                if ranks.get(name) and (ranks[name] > 1 or name in ("tp", "pp", "dp"))]
        page.layout = " × ".join(dims)

    if page.timing == "gpu":
        _gather_gpu(con, page, params, ranks.get("ranks"))
    elif page.timing == "cpu":
        _gather_cpu(con, page, params, ranks.get("ranks"))
        page.notes.append(
            "This run has no GPU kernels (a CPU-only capture): the numbers below come from "
            "Megatron's forward/backward step frames on the CPU, not from kernels.")
    else:
        page.notes.append("This run has neither GPU kernels nor Megatron step frames in the "
                          "marts; only the topology is known.")
        if ranks.get("ranks"):
            page.headline.append(Figure("ranks", f"{ranks['ranks']:,}"))

    if _has(con, "fct_pipeline_bubbles"):
        bubble = _one(con, """
            select
                count(*) as rows_,
                sum(bubble_ns) / nullif(sum(group_span_ns), 0) as bubble_ratio,
                avg(theoretical_bubble_ratio) as theoretical,
                string_agg(distinct timing_source, ', ') as sources
            from fct_pipeline_bubbles where run_id = $run
        """, params)
        if bubble.get("rows_"):
            page.headline.append(Figure(
                "pipeline bubble", pct(bubble["bubble_ratio"]),
                f"idle share of the pipeline groups' spans ({bubble['sources']} timings); "
                f"theoretical (p−1)/(v·m+p−1) = {pct(bubble['theoretical'])}"))

    if _has(con, "fct_kernel_summary"):
        page.top_kernels = _all(con, """
            with per_name as (
                select
                    name,
                    min(kind) as kind,
                    sum(kernel_count) as calls,
                    count(distinct rank) as ranks,
                    sum(total_dur_ns) as total_ns
                from fct_kernel_summary where run_id = $run
                group by name
            )
            select *, total_ns / sum(total_ns) over () as share
            from per_name
            order by total_ns desc, name
            limit $limit
        """, {**params, "limit": TOP_KERNELS})
    return page


def _gather_gpu(con: duckdb.DuckDBPyConnection, page: Page, params: dict[str, Any],
                ranks: int | None) -> None:
    head = _one(con, f"with {GPU_SCOPE_SQL}" + """
        select
            count(distinct rank) as ranks,
            count(distinct iteration) as iterations,
            avg(step_ns) as mean_step_ns,
            sum(compute_ns) / nullif(sum(span_ns), 0) as compute_share,
            sum(exposed_communication_ns) / nullif(sum(span_ns), 0) as exposed_comm_share,
            sum(idle_ns) / nullif(sum(span_ns), 0) as idle_share,
            sum(overlap_ns) / nullif(sum(communication_ns), 0) as overlap_ratio
        from scoped
    """, params)
    page.headline += [
        Figure("ranks", f"{ranks or head['ranks']:,}", page.layout),
        Figure("iterations", f"{head['iterations']:,}", "traced ProfilerSteps"),
        Figure("mean step time", ms(head["mean_step_ns"]),
               "GPU step per rank and iteration (first kernel of a step to the first of "
               "the next; fct_rank_steps)"),
        Figure("compute", pct(head["compute_share"]), "share of the step time"),
        Figure("exposed communication", pct(head["exposed_comm_share"]),
               "communication not hidden behind compute"),
        Figure("idle", pct(head["idle_share"]), "no kernel running"),
        Figure("overlap ratio", pct(head["overlap_ratio"]),
               "communication overlapped by compute (HTA's comp_comm_overlap)"),
    ]
    per_rank = _all(con, f"with {GPU_SCOPE_SQL}" + f"""
        , per_rank as (
            select rank, avg(compute_ns) as compute_ns,
                   avg(exposed_communication_ns) as exposed_ns,
                   sum(exposed_communication_ns) / nullif(sum(span_ns), 0) as exposed_share
            from scoped group by rank
        )
        select per_rank.*, {rank_label_sql()} as label,
               median(compute_ns) over () as median_compute_ns,
               median(compute_ns) over (partition by d.pp_stage) as peer_median_ns,
               count(*) over (partition by d.pp_stage) as peers,
               d.pp_stage,
               median(exposed_ns) over () as median_exposed_ns
        from per_rank left join dim_ranks as d on d.run_id = $run and d.rank = per_rank.rank
    """, params)
    if per_rank:
        page.offenders.append(_slowest_rank(per_rank, "compute time per iteration"))
        worst = max(per_rank, key=lambda r: (r["exposed_ns"] or 0, -r["rank"]))
        page.offenders.append(Offender(
            "most exposed communication", worst["label"], ms(worst["exposed_ns"]),
            f"{pct(worst['exposed_share'])} of its step time; "
            + _versus(worst["exposed_ns"], worst["median_exposed_ns"]), "family-heatmaps"))
    stages = _all(con, f"with {GPU_SCOPE_SQL}" + """
        select d.pp_stage, count(distinct scoped.rank) as ranks,
               avg(scoped.compute_ns) as compute_ns, avg(scoped.span_ns) as span_ns
        from scoped join dim_ranks as d on d.run_id = $run and d.rank = scoped.rank
        where d.pp_stage is not null
        group by d.pp_stage order by d.pp_stage
    """, params)
    _stage_offender(page, stages, "mean compute per rank and iteration")


def _gather_cpu(con: duckdb.DuckDBPyConnection, page: Page, params: dict[str, Any],
                ranks: int | None) -> None:
    head = _one(con, f"with {CPU_SCOPE_SQL}" + """
        select
            count(distinct rank) as ranks,
            count(distinct iteration) as iterations,
            avg(step_ns) as mean_step_ns,
            sum(compute_ns) / nullif(sum(step_ns), 0) as compute_share,
            sum(comm_ns) / nullif(sum(step_ns), 0) as comm_share,
            sum(optimizer_ns) / nullif(sum(step_ns), 0) as optimizer_share
        from scoped
    """, params)
    page.headline += [
        Figure("ranks", f"{ranks or head['ranks']:,}", page.layout),
        Figure("iterations", f"{head['iterations']:,}", "traced iterations"),
        Figure("mean step time", ms(head["mean_step_ns"]),
               "CPU: first to last Megatron step frame per rank and iteration"),
        Figure("forward + backward", pct(head["compute_share"]),
               "share of the step in forward/backward/recompute frames (CPU)"),
        Figure("communication frames", pct(head["comm_share"]),
               "share in pp_p2p and dp_sync frames (CPU; includes waiting)"),
        Figure("optimizer", pct(head["optimizer_share"]), "share in the optimizer step"),
    ]
    per_rank = _all(con, f"with {CPU_SCOPE_SQL}" + f"""
        , per_rank as (
            select rank, avg(compute_ns) as compute_ns, avg(comm_ns) as comm_ns,
                   sum(comm_ns) / nullif(sum(step_ns), 0) as comm_share
            from scoped group by rank
        )
        select per_rank.*, {rank_label_sql()} as label,
               median(compute_ns) over () as median_compute_ns,
               median(compute_ns) over (partition by d.pp_stage) as peer_median_ns,
               count(*) over (partition by d.pp_stage) as peers,
               d.pp_stage,
               median(comm_ns) over () as median_comm_ns
        from per_rank left join dim_ranks as d on d.run_id = $run and d.rank = per_rank.rank
    """, params)
    if per_rank:
        page.offenders.append(_slowest_rank(per_rank,
                                            "forward/backward time per iteration (CPU)"))
        worst = max(per_rank, key=lambda r: (r["comm_ns"] or 0, -r["rank"]))
        page.offenders.append(Offender(
            "most time in communication frames (pp_p2p + dp_sync, CPU)", worst["label"],
            ms(worst["comm_ns"]),
            f"{pct(worst['comm_share'])} of its step time; "
            + _versus(worst["comm_ns"], worst["median_comm_ns"]), "family-heatmaps"))
    stages = _all(con, f"with {CPU_SCOPE_SQL}" + """
        select d.pp_stage, count(distinct scoped.rank) as ranks,
               avg(scoped.compute_ns) as compute_ns, avg(scoped.step_ns) as span_ns
        from scoped join dim_ranks as d on d.run_id = $run and d.rank = scoped.rank
        where d.pp_stage is not null
        group by d.pp_stage order by d.pp_stage
    """, params)
    _stage_offender(page, stages, "mean forward/backward time per rank and iteration (CPU)")


def slowness(row: dict[str, Any]) -> float:
    """A rank's compute over its peers' median (``1.5`` = 50 % slower).

    Peers are the ranks of its pipeline stage (same layers, same work), or
    every rank when stages are unknown or it is alone in its stage.
    """
    peer = row["peer_median_ns"] if (row.get("peers") or 0) > 1 else row["median_compute_ns"]
    return (row["compute_ns"] or 0) / peer if peer else 0.0


def _slowest_rank(per_rank: list[dict[str, Any]], measure: str) -> Offender:
    """The rank that computes longest *compared with its stage peers*.

    Why not the absolute maximum: the last pipeline stage (loss, output
    layer) and the first (embedding) do more work by design; a straggler is
    a rank slower than the ranks doing the same work.
    """
    slow = max(per_rank, key=lambda r: (slowness(r), -r["rank"]))
    by_stage = (slow.get("peers") or 0) > 1 and slow.get("pp_stage") is not None
    note = (f"{slowness(slow):.2f}× the median of its stage's {slow['peers']} ranks; "
            if by_stage else "")
    note += _versus(slow["compute_ns"], slow["median_compute_ns"])
    what = ("slowest rank (" + measure + ", against its pipeline stage)" if by_stage
            else "slowest rank (" + measure + ")")
    return Offender(what, slow["label"], ms(slow["compute_ns"]), note, "family-heatmaps")


def _stage_offender(page: Page, stages: list[dict[str, Any]], measure: str) -> None:
    if not stages:
        page.offenders.append(Offender("slowest pipeline stage", "—", "—",
                                       "no pipeline stages known for this run (dim_ranks)"))
        return
    slow = max(stages, key=lambda s: (s["compute_ns"] or 0, -s["pp_stage"]))
    others = [s["compute_ns"] for s in stages if s is not slow and s["compute_ns"]]
    note = f"{measure}; {slow['ranks']} rank(s)"
    if others:
        note += f"; {slow['compute_ns'] / (sum(others) / len(others)):.2f}× the other stages' mean"
    page.offenders.append(Offender("slowest pipeline stage", f"stage {slow['pp_stage']}",
                                   ms(slow["compute_ns"]), note, "family-pipeline"))


def _versus(value: float | None, median: float | None) -> str:
    if not value or not median:
        return ""
    return f"{value / median:.2f}× the median rank"


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
