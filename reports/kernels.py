"""Top kernels by total time, and how evenly the ranks share them.

Why: the first question after "where does the time go" is "which kernels".
Kernel names are C++ template instantiations hundreds of characters long, so
the charts show a shortened name (namespaces trimmed, template arguments and
parameter lists collapsed to ``<…>``); the report's table lists the full
names. Names come from traces, so they are treated as hostile: control
characters are dropped and ``$`` cannot switch matplotlib into mathtext.
Reads ``fct_kernel_summary`` only.
"""

from __future__ import annotations

import os
import warnings

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib import MatplotlibDeprecationWarning
from matplotlib.patches import Patch

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.style import KIND_COLORS, apply_theme, kind_color

#: Kernels in the top-kernels bar chart.
TOP_N = 20
#: Kernels whose spread across ranks is drawn.
SPREAD_N = 10
#: Longest kernel label on a chart, in characters.
LABEL_LIMIT = 60

_SQL = """
    select rank, name, kind, kernel_count, total_dur_ns
    from fct_kernel_summary
    where run_id = ?
"""


def plain_text(text: object) -> str:
    """A trace string safe to hand to matplotlib: one line, printable, no mathtext.

    matplotlib parses ``$…$`` as TeX math (and raises on malformed math), so
    dollars are escaped; newlines and control characters become spaces.
    """
    cleaned = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return " ".join(cleaned.split()).replace("$", r"\$")


def short_kernel_name(name: str, limit: int = LABEL_LIMIT) -> str:
    """A readable label for a kernel name (not escaped for matplotlib; see :func:`plain_text`).

    ``void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<…>>(int, …)``
    becomes ``vectorized_elementwise_kernel<BinaryFunctor…>``: return type,
    parameter list and namespaces go, the template arguments shrink to the
    first type that names what the kernel does. Names without templates that
    are still too long keep their start and end around an ellipsis (GEMM
    names differ in the middle as often as at the end). Short names are kept
    as they are, parameter list aside.
    """
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in name).split())
    text = text.replace("(anonymous namespace)::", "")
    for prefix in ("void ", "static ", "__global__ "):
        text = text.removeprefix(prefix)
    if text.endswith(")") or len(text) > limit:
        text = _cut_parameters(text)
    if len(text) <= limit:
        return text or name[:limit]
    base, hints = _template_parts(text)
    if base:
        text = f"{base}<{hints[0]}…>" if hints else f"{base}<…>"
    if len(text) > limit:
        head = (limit - 1) * 3 // 5
        text = text[:head] + "…" + text[len(text) - (limit - 1 - head):]
    return text


def _first_depth0(text: str, char: str) -> int:
    """Index of the first ``char`` outside brackets, or -1."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == char and depth == 0:
            return i
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth = max(0, depth - 1)
    return -1


def _cut_parameters(text: str) -> str:
    """Drop the parameter list: everything from the first ``(`` outside template brackets."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return text[:i]
    return text


def _template_parts(text: str) -> tuple[str, list[str]]:
    """``(name without namespaces, type hints of its template arguments)``; ``""`` if none."""
    open_at = _first_depth0(text, "<")
    if open_at <= 0:
        return "", []
    return text[:open_at].split("::")[-1].strip(), _type_hints(text[open_at + 1:])


def _type_hints(arguments: str) -> list[str]:
    """The last name component of each template argument that is a type, not a number."""
    parts: list[str] = []
    depth, current = 0, []
    for ch in arguments:
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            if depth == 0:
                break  # the end of the template argument list
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    hints = []
    for part in parts:
        part = part.strip()
        if not part or part in ("true", "false") or part[0].isdigit() or part[0] == "-":
            continue
        for stop in ("(", "<"):
            cut = part.find(stop)
            if cut > 0:
                part = part[:cut]
        part = part.split("::")[-1].strip()
        if part:
            hints.append(part)
    return hints


def unique_labels(names: list[str], limit: int = LABEL_LIMIT) -> dict[str, str]:
    """Short labels for ``names``; where two shorten alike, their labels show where they differ.

    Kernels that still share a label are numbered ``[2]``, ``[3]``, ….
    """
    labels = {name: short_kernel_name(name, limit) for name in names}
    groups: dict[str, list[str]] = {}
    for name, label in labels.items():
        groups.setdefault(label, []).append(name)
    for members in groups.values():
        if len(members) < 2:
            continue
        parts = {name: _template_parts(_cut_parameters(
            " ".join(name.split()).removeprefix("void "))) for name in members}
        if all(base for base, _ in parts.values()):
            # Template kernels: show the first type argument in which they differ.
            hint_lists = [hints for _, hints in parts.values()]
            width = max(len(h) for h in hint_lists)
            differ = next((i for i in range(width)
                           if len({tuple(h[i:i + 1]) for h in hint_lists}) > 1), None)
            if differ is not None:
                for name, (base, hints) in parts.items():
                    hint = hints[differ] if differ < len(hints) else ""
                    text = f"{base}<…{hint}…>"
                    labels[name] = text if len(text) <= limit else text[: limit - 1] + "…"
                continue
        full = {name: short_kernel_name(name, 10_000) for name in members}
        common = len(os.path.commonprefix(list(full.values())))
        for name, text in full.items():
            if len(text) <= limit:
                labels[name] = text
                continue
            head = min(len(text), common + 12)
            tail = limit - 1 - head
            labels[name] = (text[:head] + "…" + text[-tail:]) if tail >= 6 else (
                "…" + text[max(0, common - 8):][: limit - 2] + "…")
    seen: dict[str, int] = {}
    for name in names:
        label = labels[name]
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[name] = f"{label} [{seen[label]}]"
    return labels


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
