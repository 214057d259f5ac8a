"""What every chart family shares: the context it draws from and how it saves.

Why one small module: a new chart family should be one new module plus one
line in :mod:`tracehouse.reports.registry`. Families read marts only (never
the lake or staging views), draw with seaborn/matplotlib on the headless Agg
backend, and save each figure as PNG and SVG through :func:`save_figure`,
which writes atomically so a cron re-run never leaves a half-written image.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import matplotlib

matplotlib.use("Agg")  # headless: reports run from cron and CI

import matplotlib.pyplot as plt  # noqa: E402

from tracehouse.reports.files import publish_mode  # noqa: E402

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    from matplotlib.figure import Figure

#: Above this many ranks (or rows of any per-rank chart) a family aggregates
#: or facets instead of drawing one unreadable row per rank.
MAX_ROWS_PER_AXIS = 64

#: Resolution of the PNGs: sharp enough to read kernel labels when zoomed.
PNG_DPI = 110


@dataclass(frozen=True)
class ChartContext:
    """What a family needs to draw one run's charts.

    ``con`` is a read-only DuckDB connection on ``tracehouse.duckdb``;
    ``compare_run_id`` is set only for the run-comparison family.
    """

    con: duckdb.DuckDBPyConnection
    run_id: str
    out_dir: Path
    compare_run_id: str | None = None

    def df(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        """Run ``sql`` with bound ``params`` and return a pandas DataFrame."""
        return self.con.execute(sql, list(params)).df()

    def has_table(self, name: str) -> bool:
        """True when the warehouse holds a table or view called ``name``."""
        row = self.con.execute(
            "select count(*) from information_schema.tables where table_name = ?", [name]
        ).fetchone()
        return bool(row and row[0])


class NothingToShow(Exception):  # noqa: N818 - a verdict, not a failure
    """A family has nothing truthful to draw for this run, and says why.

    Raised from ``render`` instead of returning ``[]`` when the reason is
    worth telling the reader (e.g. no trace carries process-group args, so
    every communication kernel's group is unknown): the report shows the
    reason where the charts would be, and the family is not a failure.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RenderedChart:
    """One saved figure: what the HTML report shows and links.

    ``title`` and ``caption`` are plain text (they may hold trace-derived
    strings); the HTML writer escapes them.
    """

    slug: str
    title: str
    caption: str
    png: Path
    svg: Path


class ChartFamily(Protocol):
    """A chart family: one module, one ``FAMILY`` object satisfying this."""

    #: Short identifier, also the prefix of every slug it writes.
    name: str
    #: Section heading in the report.
    title: str
    #: Marts it reads: the report re-renders the family only when one changed.
    marts: tuple[str, ...]

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """Draw this family's charts for ``ctx.run_id``; [] when there is nothing to show."""
        ...


def save_figure(fig: Figure, ctx: ChartContext, slug: str, title: str,
                caption: str = "") -> RenderedChart:
    """Save ``fig`` as ``<slug>.png`` and ``<slug>.svg`` in ``ctx.out_dir``, atomically.

    Each file is written to a temporary name in the same folder and renamed
    into place, so readers see either the old or the new image; it gets the
    mode the umask gives any file (:func:`publish_mode`). The figure is
    closed afterwards (matplotlib keeps every open figure in memory).
    """
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    try:
        for ext in ("png", "svg"):
            final = ctx.out_dir / f"{slug}.{ext}"
            fd, tmp = tempfile.mkstemp(prefix=f".{slug}.", suffix=f".{ext}", dir=ctx.out_dir)
            os.close(fd)
            try:
                fig.savefig(tmp, format=ext, dpi=PNG_DPI, bbox_inches="tight")
                publish_mode(tmp)
                os.replace(tmp, final)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            paths[ext] = final
    finally:
        plt.close(fig)
    return RenderedChart(slug=slug, title=title, caption=caption,
                         png=paths["png"], svg=paths["svg"])
