"""``tracehouse report``: every chart family of one run plus an ``index.html``.

Why it is shaped this way:

* **Marts only.** Families read ``fct_*``/``dim_*`` through a read-only
  DuckDB connection; the headline numbers and worst offenders on the page are
  SQL over the same marts, so the page and ``tracehouse sql`` always agree.
* **One family failing is not the report failing.** Each family renders in
  isolation; a family that raises is reported (one progress line naming the
  family and the error, a notice on the page) and the others still render.
  :attr:`ReportResult.failures` carries them so the CLI exits 1.
* **Atomic re-runs.** The report is rendered into a temporary sibling folder
  and swapped in (``renameat2(RENAME_EXCHANGE)`` where the kernel has it,
  else two renames), so a reader or a web server never sees a half-written
  report, and a crash leaves the previous report intact.
* **Cron-friendly.** No prompts. ``report.json`` in the report folder stores a
  fingerprint of every mart the report reads (row count and an
  order-independent hash of the run's rows) and of the report code. When
  nothing changed and ``force`` is off, nothing is re-rendered; when only
  some marts changed, only the families reading them are re-drawn and the
  others' images are carried over.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import duckdb

from tracehouse.core.warehouse import Warehouse
from tracehouse.reports.base import ChartContext, ChartFamily, NothingToShow, RenderedChart
from tracehouse.reports.files import publish_mode
from tracehouse.reports.registry import FAMILY_MODULES

#: Name of the manifest that marks a folder as a tracehouse report and holds
#: the fingerprints of the last rendering.
MANIFEST = "report.json"
#: Bump when the manifest's shape changes (old manifests then never match).
MANIFEST_FORMAT = 1
INDEX = "index.html"

#: Marts the page itself reads (headline numbers, worst offenders, top kernels).
HEADLINE_MARTS: tuple[str, ...] = (
    "fct_run_summary",
    "fct_rank_summary",
    "fct_stage_summary",
    "fct_run_kernel_summary",
    "fct_findings",  # the first section, "What to change" (reports/findings.py)
    "fct_iteration_summary",
)
#: At least one of these must exist for there to be anything to report.
REQUIRED_ANY: tuple[str, ...] = ("fct_rank_iterations", "fct_microbatch_phases")


class ReportError(Exception):
    """The report cannot be rendered at all (no marts, unknown run, unsafe folder).

    The message says what is wrong and which command fixes it.
    """


@dataclass(frozen=True)
class FamilyFailure:
    """A chart family that raised; the other families still rendered."""

    family: str
    error: str

    def __str__(self) -> str:
        return f"{self.family}: {self.error}"


@dataclass
class FamilySection:
    """One family's part of the page: its charts, or why there are none."""

    name: str
    title: str
    charts: list[RenderedChart] = field(default_factory=list)
    error: str | None = None
    #: Why there are no charts, when the family said (:class:`NothingToShow`).
    note: str | None = None
    reused: bool = False
    seconds: float = 0.0


@dataclass
class ReportResult:
    """What :func:`render_report` did."""

    run_id: str
    out_dir: Path
    index_html: Path
    compare_run_id: str | None = None
    sections: list[FamilySection] = field(default_factory=list)
    failures: list[FamilyFailure] = field(default_factory=list)
    #: True when the marts were unchanged and nothing was re-rendered.
    skipped: bool = False
    fingerprint: str = ""
    seconds: float = 0.0

    @property
    def charts(self) -> list[RenderedChart]:
        """Every chart of the report, in page order."""
        return [chart for section in self.sections for chart in section.charts]


# --------------------------------------------------------------------------- entry point


def render_report(
    warehouse_root: Path,
    out_dir: Path | None = None,
    run_id: str | None = None,
    compare_run_id: str | None = None,
    force: bool = False,
    stream: TextIO | None = None,
) -> ReportResult:
    """Render every chart family and ``index.html`` for one run into ``out_dir``.

    Args:
        warehouse_root: the warehouse folder (holds ``tracehouse.duckdb``).
        out_dir: the report folder; ``None`` means ``<warehouse>/reports/<run>``.
            It is replaced as a whole, so it must be new, empty, or a previous
            report (it holds ``report.json``).
        run_id: the run; ``None`` picks the only run, else the newest by
            trace time, and says which on ``stream``.
        compare_run_id: a second run for the comparison family.
        force: re-render even when the marts are unchanged.
        stream: where progress lines go (one per chart family); default stderr.

    Raises:
        ReportError: no database or marts, unknown run, or an ``out_dir``
            that is not a report folder.
    """
    started = time.perf_counter()
    stream = sys.stderr if stream is None else stream

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    place = Warehouse(Path(warehouse_root).resolve())
    with _open_marts(place) as con:
        run_id = _choose_run(con, run_id, say)
        if compare_run_id is not None:
            _check_run(con, compare_run_id, what="comparison run")
            if compare_run_id == run_id:
                raise ReportError(f"--compare names the reported run itself ({run_id!r}); "
                                  "name a different run")
        out = (Path(out_dir) if out_dir is not None else place.reports / run_id).resolve()
        _check_out_dir(out)

        modules = _load_families()
        marts = sorted({*HEADLINE_MARTS,
                        *(m for _, fam, _ in modules if fam for m in getattr(fam, "marts", ()))})
        runs = [run_id] if compare_run_id is None else [run_id, compare_run_id]
        mart_prints = {name: _mart_fingerprint(con, name, runs) for name in marts}
        page_code = _code_fingerprint([__name__, "tracehouse.reports.html",
                                       "tracehouse.reports.findings", "tracehouse.query.findings"])
        code_prints = {"page": page_code,
                       **{m: _code_fingerprint([m, *SHARED_CHART_MODULES])
                          for m, _, _ in modules}}
        fingerprint = _digest({"marts": mart_prints, "code": code_prints,
                               "run": run_id, "compare": compare_run_id})
        previous = _read_manifest(out)
        result = ReportResult(run_id=run_id, out_dir=out, index_html=out / INDEX,
                              compare_run_id=compare_run_id, fingerprint=fingerprint)

        if not force and previous.get("fingerprint") == fingerprint and (out / INDEX).is_file():
            say(f"report for {run_id} is up to date (marts unchanged since "
                f"{previous.get('generated_at', 'the last run')}); nothing re-rendered "
                "(--force re-renders)")
            result.skipped = True
            result.sections = [_section_from_manifest(out, entry)
                               for entry in previous.get("families", [])]
            result.failures = [FamilyFailure(s.name, s.error) for s in result.sections if s.error]
            result.seconds = time.perf_counter() - started
            return result

        if previous and not force:
            why = _what_changed(previous, mart_prints, code_prints, run_id, compare_run_id)
            say(f"re-rendering the report for {run_id}: {why}")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            manifest_families = []
            for position, (module_name, family, import_error) in enumerate(modules, 1):
                label = f"[{position}/{len(modules)}]"
                short = module_name.rsplit(".", 1)[-1]
                if family is None:
                    section = FamilySection(name=short, title=short, error=import_error)
                    say(f"{label} {short}: FAILED — {import_error}")
                else:
                    family_print = _digest({
                        "marts": {m: mart_prints.get(m) for m in getattr(family, "marts", ())},
                        "code": _code_fingerprint([module_name, *SHARED_CHART_MODULES]),
                        "compare": compare_run_id, "run": run_id})
                    section = _render_family(con, family, run_id, compare_run_id, tmp, out,
                                             previous, family_print, force)
                    _say_family(say, label, section)
                    manifest_families.append({**_section_to_manifest(section),
                                              "fingerprint": family_print})
                    result.sections.append(section)
                    continue
                manifest_families.append({**_section_to_manifest(section), "fingerprint": ""})
                result.sections.append(section)
            result.failures = [FamilyFailure(s.name, s.error)
                               for s in result.sections if s.error is not None]

            from tracehouse.reports.html import gather_page, write_index

            page = gather_page(con, run_id, compare_run_id)
            write_index(tmp / INDEX, page, result.sections, generated_at=_now(),
                        fingerprint=fingerprint)
            _write_manifest(tmp / MANIFEST, {
                "format": MANIFEST_FORMAT, "run_id": run_id,
                "compare_run_id": compare_run_id, "fingerprint": fingerprint,
                "generated_at": _now(), "marts": mart_prints, "code": code_prints,
                "families": manifest_families,
            })
            _swap_in(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    # Charts were saved under the temporary folder: point them at the report.
    for section in result.sections:
        section.charts = [replace(chart, png=out / chart.png.name, svg=out / chart.svg.name)
                          for chart in section.charts]
    result.seconds = time.perf_counter() - started
    failed = f", {len(result.failures)} famil{'y' if len(result.failures) == 1 else 'ies'} failed" \
        if result.failures else ""
    say(f"report for {run_id}: {len(result.charts)} charts in {result.seconds:.1f} s{failed} "
        f"→ {result.index_html}")
    return result


# --------------------------------------------------------------------------- families


def _load_families() -> list[tuple[str, ChartFamily | None, str | None]]:
    """Import each registered family on its own, so one broken module fails alone."""
    loaded: list[tuple[str, ChartFamily | None, str | None]] = []
    for name in FAMILY_MODULES:
        try:
            loaded.append((name, importlib.import_module(name).FAMILY, None))
        except Exception as exc:  # noqa: BLE001 - reported as that family's failure
            loaded.append((name, None, f"cannot load {name}: {type(exc).__name__}: {exc}"))
    return loaded


def _render_family(con: duckdb.DuckDBPyConnection, family: ChartFamily, run_id: str,
                   compare_run_id: str | None, tmp: Path, out: Path,
                   previous: dict[str, Any], family_print: str, force: bool) -> FamilySection:
    """Draw one family into ``tmp``, or carry its images over when its marts are unchanged."""
    section = FamilySection(name=family.name, title=family.title)
    started = time.perf_counter()
    if not force:
        old = next((entry for entry in previous.get("families", [])
                    if entry.get("name") == family.name), None)
        if old and old.get("fingerprint") == family_print and old.get("error") is None:
            kept = _section_from_manifest(out, old)
            files = [path for chart in kept.charts for path in (chart.png, chart.svg)]
            if all(path.is_file() for path in files):
                for path in files:
                    _link_or_copy(path, tmp / path.name)
                section.charts = [replace(chart, png=tmp / chart.png.name,
                                          svg=tmp / chart.svg.name) for chart in kept.charts]
                section.reused = True
                section.seconds = time.perf_counter() - started
                return section
    ctx = ChartContext(con=con, run_id=run_id, out_dir=tmp, compare_run_id=compare_run_id)
    try:
        section.charts = list(family.render(ctx))
    except NothingToShow as verdict:
        section.note = verdict.reason
        section.charts = []
    except Exception as exc:  # noqa: BLE001 - one family failing must not stop the others
        section.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        section.charts = []
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")  # a family that raised may leave figures open
    section.seconds = time.perf_counter() - started
    return section


def _say_family(say: Any, label: str, section: FamilySection) -> None:
    if section.error is not None:
        say(f"{label} {section.name}: FAILED — {section.error}")
    elif section.reused:
        kept = f"kept {len(section.charts)} chart(s)" if section.charts else "nothing to show"
        say(f"{label} {section.name}: marts unchanged, {kept}")
    elif section.charts:
        say(f"{label} {section.name}: {len(section.charts)} chart(s) in {section.seconds:.1f} s")
    else:
        say(f"{label} {section.name}: nothing to show for this run"
            + (f" ({section.note})" if section.note else ""))


def _section_to_manifest(section: FamilySection) -> dict[str, Any]:
    return {
        "name": section.name,
        "title": section.title,
        "error": section.error,
        "note": section.note,
        "charts": [{"slug": c.slug, "title": c.title, "caption": c.caption,
                    "png": c.png.name, "svg": c.svg.name} for c in section.charts],
    }


def _section_from_manifest(out: Path, entry: dict[str, Any]) -> FamilySection:
    charts = [RenderedChart(slug=c["slug"], title=c["title"], caption=c["caption"],
                            png=out / c["png"], svg=out / c["svg"])
              for c in entry.get("charts", [])]
    return FamilySection(name=entry.get("name", "?"), title=entry.get("title", "?"),
                         charts=charts, error=entry.get("error"), note=entry.get("note"),
                         reused=True)


# --------------------------------------------------------------------------- warehouse


@contextlib.contextmanager
def _open_marts(place: Warehouse) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection on the warehouse, or a ReportError saying what to run."""
    if not place.database.is_file():
        raise ReportError(
            f"no warehouse database at {place.database}; load traces and build the marts "
            f"first: tracehouse ingest PATH --warehouse {place.root} && "
            f"tracehouse build --warehouse {place.root}")
    try:
        con = duckdb.connect(str(place.database), read_only=True)
    except duckdb.Error as exc:
        raise ReportError(
            f"cannot open {place.database}: {exc}; if a `tracehouse build` or ingest is "
            "writing it, retry when it is done") from exc
    try:
        present = {row[0] for row in con.execute(
            "select table_name from information_schema.tables").fetchall()}
        if not present.intersection(REQUIRED_ANY):
            raise ReportError(
                f"the warehouse at {place.root} has no marts yet (none of "
                f"{', '.join(REQUIRED_ANY)}); build them: tracehouse build --warehouse "
                f"{place.root}")
        yield con
    finally:
        con.close()


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute("select count(*) from information_schema.tables where table_name = ?",
                      [name]).fetchone()
    return bool(row and row[0])


def _runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int | None]]:
    """Every run in the marts with its latest trace time (ns), newest first."""
    parts = []
    for table, column in (("fct_rank_iterations", "last_end_ns"),
                          ("fct_microbatch_phases", "last_end_ns"),
                          ("dim_ranks", "null::bigint"),
                          ("fct_comm_group_bytes", "null::bigint")):  # comm logs only
        if _table_exists(con, table):
            parts.append(f"select run_id, {column} as ended_ns from {table}")  # fixed names only
    if not parts:
        return []
    rows = con.execute(
        "select run_id, max(ended_ns) from (" + " union all ".join(parts) + ") "
        "where run_id is not null group by run_id order by max(ended_ns) desc nulls last, run_id"
    ).fetchall()
    return [(str(run), None if ended is None else int(ended)) for run, ended in rows]


def _choose_run(con: duckdb.DuckDBPyConnection, run_id: str | None, say: Any) -> str:
    runs = _runs(con)
    if not runs:
        raise ReportError("the marts hold no runs; load traces with `tracehouse ingest PATH` "
                          "and rebuild with `tracehouse build`")
    if run_id is not None:
        _check_run(con, run_id, what="run", runs=runs)
        return run_id
    chosen = runs[0][0]
    if len(runs) == 1:
        say(f"reporting run {chosen} (the only run in the warehouse)")
    else:
        others = ", ".join(run for run, _ in runs[1:])
        say(f"reporting run {chosen}, the newest by trace time of {len(runs)} runs "
            f"(others: {others}; choose one with --run NAME)")
    return chosen


def _check_run(con: duckdb.DuckDBPyConnection, run_id: str, what: str,
               runs: Sequence[tuple[str, int | None]] | None = None) -> None:
    known = [run for run, _ in (runs if runs is not None else _runs(con))]
    if run_id not in known:
        listed = ", ".join(known) if known else "none"
        raise ReportError(f"unknown {what} {run_id!r}; runs in the warehouse: {listed}")


def _mart_fingerprint(con: duckdb.DuckDBPyConnection, name: str,
                      runs: Sequence[str]) -> list[Any] | None:
    """Row count and order-independent hash of the runs' rows of mart ``name``; None if absent."""
    if not _table_exists(con, name):
        return None
    # ``name`` comes from the families' fixed lists of mart names, never from a trace.
    quoted = '"' + name.replace('"', '""') + '"'
    try:
        count, total = con.execute(
            f"select count(*), coalesce(sum(hash(t)::hugeint), 0)::varchar from {quoted} as t "
            "where list_contains(?, t.run_id)", [list(runs)]).fetchone()
    except duckdb.Error:  # a table without run_id: fingerprint all of it
        count, total = con.execute(
            f"select count(*), coalesce(sum(hash(t)::hugeint), 0)::varchar from {quoted} as t"
        ).fetchone()
    return [int(count), str(total)]


#: Modules several families draw with: a change to one re-renders them all.
SHARED_CHART_MODULES = ("tracehouse.reports.base", "tracehouse.reports.style",
                        "tracehouse.reports.gantt", "tracehouse.reports.pipeline")


def _code_fingerprint(modules: Sequence[str]) -> str:
    """Hash of the modules' source, so a new tracehouse version re-renders its charts."""
    digest = hashlib.sha256()
    for name in modules:
        try:
            source = inspect.getsource(importlib.import_module(name))
        except Exception:  # noqa: BLE001 - an unloadable module simply never matches
            source = f"<unavailable {name}>"
        digest.update(source.encode())
    return digest.hexdigest()[:16]


def _what_changed(previous: dict[str, Any], marts: dict[str, Any], code: dict[str, str],
                  run_id: str, compare_run_id: str | None) -> str:
    """Why the last report is out of date, in words (for the progress stream)."""
    reasons = []
    changed = sorted(name for name, value in marts.items()
                     if previous.get("marts", {}).get(name) != value)
    if changed:
        reasons.append("marts changed: " + ", ".join(changed))
    modules = sorted(name.rsplit(".", 1)[-1] for name, value in code.items()
                     if previous.get("code", {}).get(name) != value)
    if modules:
        reasons.append("report code changed: " + ", ".join(modules))
    if previous.get("compare_run_id") != compare_run_id:
        reasons.append("different comparison run")
    if previous.get("run_id") != run_id:
        reasons.append("different run")
    return "; ".join(reasons) or "the previous report is incomplete"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# --------------------------------------------------------------------------- the report folder


def _check_out_dir(out: Path) -> None:
    """Refuse to replace a folder that is not a previous report (``--out ~`` must not wipe home)."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out} exists and is not a folder; choose another --out")
    if out.is_dir() and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise ReportError(
            f"refusing to replace {out}: it is not empty and holds no {MANIFEST}, so it is "
            "not a tracehouse report; choose a new or empty folder with --out")


def _read_manifest(out: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return {}
    return manifest


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    publish_mode(target)  # a report written before modes followed the umask was 0600


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux's renameat2; False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _swap_in(tmp: Path, out: Path) -> None:
    """Put the freshly rendered ``tmp`` at ``out``, replacing any previous report whole."""
    publish_mode(tmp, directory=True)  # mkdtemp makes it 0700; a report is meant to be read
    if not out.exists():
        os.rename(tmp, out)
        return
    if _exchange(tmp, out):  # tmp now holds the old report
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


__all__ = ["FamilyFailure", "FamilySection", "ReportError", "ReportResult", "render_report"]
