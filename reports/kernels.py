"""Top kernels by total time, and how evenly the ranks share them.

Why: the first question after "where does the time go" is "which kernels".
Kernel names are C++ template instantiations hundreds of characters long, so
the charts show the short names of :mod:`tracehouse.reports.kernel_names`
(the same as the report's table and the Perfetto export); the report's
table lists the full names too. Names come from traces, so they are treated
as hostile: control characters are dropped and ``$`` cannot switch
matplotlib into mathtext.
Reads ``fct_kernel_summary`` only.
"""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib import MatplotlibDeprecationWarning
from matplotlib.patches import Patch

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.kernel_names import (  # noqa: F401 - re-exported for older imports
    LABEL_LIMIT,
    plain_text,
    short_kernel_name,
    unique_labels,
)
from tracehouse.reports.style import KIND_COLORS, apply_theme, kind_color

#: Kernels in the top-kernels bar chart.
TOP_N = 20
#: Kernels whose spread across ranks is drawn.
SPREAD_N = 10

_SQL = """
    select rank, name, kind, kernel_count, total_dur_ns
    from fct_kernel_summary
    where run_id = ?
"""


class KernelsFamily:
    """Top kernels and their spread across ranks (see the module docstring)."""

    name = "kernels"
    title = "Top kernels"
    marts: tuple[str, ...] = ("fct_kernel_summary",)

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """The top-kernels bar chart, plus the spread across ranks when there are several."""
        frame = ctx.df(_SQL, [ctx.run_id])
        if frame.empty:
            return []
        apply_theme()
        frame["total_ms"] = frame["total_dur_ns"].astype(float) / 1e6
        totals = (frame.groupby("name", as_index=False)
                  .agg(kind=("kind", "min"), total_ms=("total_ms", "sum"),
                       calls=("kernel_count", "sum"), ranks=("rank", "nunique"))
                  .sort_values(["total_ms", "name"], ascending=[False, True]))
        grand_total = float(totals["total_ms"].sum()) or 1.0
        top = totals.head(TOP_N).reset_index(drop=True)
        labels = unique_labels(list(top["name"]))
        charts = [self._top(ctx, top, labels, grand_total, len(totals),
                            int(frame["rank"].nunique()))]
        if frame["rank"].nunique() > 1:
            charts.append(self._spread(ctx, frame, top.head(SPREAD_N), labels))
        return charts

    def _top(self, ctx: ChartContext, top: pd.DataFrame, labels: dict[str, str],
             grand_total: float, distinct: int, ranks: int) -> RenderedChart:
        fig, ax = plt.subplots(figsize=(11, 0.34 * len(top) + 1.6))
        y = range(len(top))
        ax.barh(list(y), top["total_ms"], color=[kind_color(k) for k in top["kind"]])
        ax.set_yticks(list(y))
        ax.set_yticklabels([plain_text(labels[n]) for n in top["name"]], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("total time over all ranks (ms, durations summed)")
        right = float(top["total_ms"].max())
        for i, row in top.iterrows():
            ax.text(row["total_ms"] + right * 0.01, i,
                    f"{100 * row['total_ms'] / grand_total:.1f} % · {int(row['calls']):,} calls",
                    va="center", fontsize=7, color="#333333")
        ax.set_xlim(0, right * 1.22)
        kinds = [k for k in KIND_COLORS if k in set(top["kind"])]
        ax.legend(handles=[Patch(color=kind_color(k), label=k) for k in kinds],
                  loc="lower right", title="kind")
        ax.set_title(f"Top {len(top)} of {distinct:,} kernels by total time — {ctx.run_id}")
        fig.tight_layout()
        share = 100 * float(top["total_ms"].sum()) / grand_total
        caption = (f"The {len(top)} kernels with the most summed duration over all {ranks:,} "
                   f"rank(s) (fct_kernel_summary), {share:.1f} % of all kernel time; labels "
                   "are shortened (namespaces and template arguments collapsed to <…>), "
                   "the full names are in the table above. Text: share of all kernel time "
                   "and number of calls.")
        return save_figure(fig, ctx, "kernels-top", "Top kernels by total time", caption)

    def _spread(self, ctx: ChartContext, frame: pd.DataFrame, top: pd.DataFrame,
                labels: dict[str, str]) -> RenderedChart:
        ranks = int(frame["rank"].nunique())
        names = list(top["name"])
        per_rank = frame[frame["name"].isin(names)].copy()
        per_rank["label"] = [plain_text(labels[n]) for n in per_rank["name"]]
        order = [plain_text(labels[n]) for n in names]
        fig, ax = plt.subplots(figsize=(11, 0.42 * len(names) + 1.8))
        with warnings.catch_warnings():
            # seaborn 0.13 passes matplotlib 3.11 the deprecated ``vert``; not ours to fix.
            warnings.simplefilter("ignore", MatplotlibDeprecationWarning)
            sns.boxplot(data=per_rank, x="total_ms", y="label", order=order, ax=ax,
                        color="#dfe6ee", fliersize=2 if ranks > MAX_ROWS_PER_AXIS else 0,
                        linewidth=0.8)
        if ranks <= MAX_ROWS_PER_AXIS:
            palette = {plain_text(labels[n]): kind_color(k)
                       for n, k in zip(top["name"], top["kind"])}
            sns.stripplot(data=per_rank, x="total_ms", y="label", order=order, ax=ax,
                          hue="label", palette=palette, legend=False, size=4, jitter=0.18)
        ax.set_xlabel("time per rank (ms, durations summed over the trace)")
        ax.set_ylabel("")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_title(f"How the top kernels' time is spread across {ranks:,} ranks — {ctx.run_id}")
        notes = []
        for name in names[:3]:
            rows = per_rank[per_rank["name"] == name]
            worst = rows.loc[rows["total_ms"].idxmax()]
            median = float(rows["total_ms"].median()) or 1.0
            notes.append(f"{labels[name]}: rank {int(worst['rank'])} at "
                         f"{worst['total_ms'] / median:.2f}× the median")
        fig.tight_layout()
        how = ("one dot per rank over a box plot" if ranks <= MAX_ROWS_PER_AXIS
               else "box plots only (too many ranks for one dot each; outliers drawn)")
        caption = (f"Each kernel's summed time on each rank, {how}; a rank far to the right "
                   "runs that kernel longer than its peers (a straggler or an imbalance). "
                   + "; ".join(notes) + ".")
        return save_figure(fig, ctx, "kernels-spread", "Top kernels across ranks", caption)


FAMILY = KernelsFamily()
