"""What fills the pipeline bubble: schedule parts and waits, per pipeline group.

Why: a measured bubble of 40 % against a theoretical 16 % makes a reader
distrust one of them. ``fct_pipeline_bubble_parts`` says where the
difference lies: time inside pipeline send/recv (the schedule's own bubble
shows there, plus waiting for a slower stage), inside gradient-sync
collectives (the DP all-reduce waiting on a slow replica), inside other
collectives (a tensor-parallel peer that computes slower), other kernels,
or nothing at all; and whether it sits in the warm-up, the steady 1F1B
state or the cool-down. Two charts: the split per pipeline group against
the theory, and the schedule parts per stage. Beyond 64 groups the groups
with the largest bubble are drawn, with the whole run's mean first.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import IDLE_COLOR, PHASE_COLORS, apply_theme

#: What filled the bubble, in stacking order: (column, colour, label).
WAITS: tuple[tuple[str, str, str], ...] = (
    ("p2p_wait_ns", PHASE_COLORS["pp_p2p"], "in P2P send/recv (schedule + slower stage)"),
    ("dp_wait_ns", PHASE_COLORS["dp_sync"], "in gradient-sync collectives (DP)"),
    ("collective_wait_ns", "#4e79a7", "in other collectives (TP, CP, EP)"),
    ("other_kernel_ns", PHASE_COLORS["optimizer"], "other kernels (optimizer, ...)"),
    ("idle_ns", IDLE_COLOR, "nothing running"),
)
#: Schedule parts in order: (name, colour).
PARTS: tuple[tuple[str, str], ...] = (
    ("warmup", "#9ecae1"),
    ("steady", "#3182bd"),
    ("cooldown", "#08519c"),
)

_SQL = """
    select
        parts.pp_group_index, parts.iteration, parts.pp_stage, parts.rank,
        parts.schedule_part, parts.group_span_ns, parts.busy_ns, parts.bubble_ns,
        parts.p2p_wait_ns, parts.dp_wait_ns, parts.collective_wait_ns,
        parts.other_kernel_ns, parts.idle_ns, bubbles.theoretical_bubble_ratio
    from fct_pipeline_bubble_parts as parts
    inner join fct_pipeline_bubbles as bubbles
        using (run_id, pp_group_index, iteration, pp_stage)
    where parts.run_id = ?
"""


def _shares(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Bubble and its parts as shares of the stages' windows, per ``by``."""
    columns = ["bubble_ns", *(column for column, _c, _l in WAITS)]
    sums = frame.groupby(by)[columns].sum()
    spans = (frame.drop_duplicates(["pp_group_index", "iteration", "pp_stage"])
             .groupby(by)["group_span_ns"].sum())
    shares = sums.div(spans, axis=0)
    shares["theory"] = frame.groupby(by)["theoretical_bubble_ratio"].mean()
    return shares


def _imbalance(frame: pd.DataFrame) -> str:
    """A sentence naming the heaviest stage when stages' work differs by over 5 %."""
    busy = frame.groupby("pp_stage")["busy_ns"].sum() / frame.groupby("pp_stage")["rank"].nunique()
    if len(busy) < 2 or float(busy.min()) <= 0:
        return ""
    excess = float(busy.max()) / float(busy.min()) - 1
    if excess <= 0.05:
        return ""
    return (f" Stages are unequal: stage {int(busy.idxmax())} works {100 * excess:.0f} % more "
            f"than stage {int(busy.idxmin())} per rank, and the lighter stages wait for it in "
            "P2P every microbatch (the steady part of the chart below).")


class BubblesFamily:
    """Pipeline bubble split (see the module docstring)."""

    name = "bubbles"
    title = "What fills the pipeline bubble"
    marts: tuple[str, ...] = ("fct_pipeline_bubble_parts", "fct_pipeline_bubbles")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """The split per group and the schedule parts per stage; [] without pipeline groups."""
        if not ctx.has_table("fct_pipeline_bubble_parts"):
            return []
        frame = ctx.df(_SQL, [ctx.run_id])
        if frame.empty:
            return []
        apply_theme()
        return [self._groups(ctx, frame), self._parts(ctx, frame)]

    def _groups(self, ctx: ChartContext, frame: pd.DataFrame) -> RenderedChart:
        shares = _shares(frame, "pp_group_index")
        shares.index = [f"pp group {int(g)}" for g in shares.index]
        whole = _shares(frame.assign(all_="all groups"), "all_")
        if len(shares) > MAX_ROWS_PER_AXIS:
            shares = shares.sort_values("bubble_ns", ascending=False).head(MAX_ROWS_PER_AXIS // 2)
        table = pd.concat([whole, shares])
        fig, ax = plt.subplots(figsize=(9.0, max(3.4, 0.32 * len(table) + 2.4)))
        left = pd.Series(0.0, index=table.index)
        for column, color, label in WAITS:
            ax.barh(table.index, 100 * table[column], left=left, color=color, label=label)
            left = left + 100 * table[column]
        ax.scatter(100 * table["theory"], table.index, marker="|", s=300, color="black",
                   zorder=3, label="theory (p−1)/(v·m+p−1)")
        for row, (value, theory) in enumerate(zip(table["bubble_ns"], table["theory"],
                                                   strict=True)):
            ax.text(100 * value, row, f" {100 * value:.1f} %"
                    + (f" (theory {100 * theory:.1f} %)" if pd.notna(theory) else ""),
                    va="center", fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 100 * float(table["bubble_ns"].max()) * 1.45 or 1.0)
        ax.set_xlabel("share of the pipeline window (%), stages and iterations summed")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8)
        ax.set_title("Pipeline bubble by what filled it — " + plain_text(ctx.run_id))
        fig.tight_layout()
        overall = whole.iloc[0]
        waits = {label: float(overall[column]) for column, _c, label in WAITS}
        biggest = max(waits, key=waits.get)
        theory = overall["theory"]
        caption = (f"Measured bubble {100 * overall['bubble_ns']:.1f} % of the pipeline windows"
                   + (f" against a theoretical {100 * theory:.1f} %" if pd.notna(theory) else "")
                   + ". Of it: " + ", ".join(f"{100 * v:.1f} % {k}" for k, v in waits.items())
                   + f". Largest: {biggest}. The theory counts only the schedule's warm-up and "
                   "cool-down with equal stages and free transfers: waits in collectives and "
                   "for a slower stage or replica come on top (fct_pipeline_bubble_parts)."
                   + _imbalance(frame))
        return save_figure(fig, ctx, "bubbles-split", "Pipeline bubble by what filled it",
                           caption)

    def _parts(self, ctx: ChartContext, frame: pd.DataFrame) -> RenderedChart:
        per_part = frame.pivot_table(index="pp_stage", columns="schedule_part",
                                     values="bubble_ns", aggfunc="sum").fillna(0.0)
        spans = (frame.drop_duplicates(["pp_group_index", "iteration", "pp_stage"])
                 .groupby("pp_stage")["group_span_ns"].sum())
        per_part = per_part.div(spans, axis=0) * 100
        per_part.index = [f"stage {int(s)}" for s in per_part.index]
        fig, ax = plt.subplots(figsize=(8.0, max(2.4, 0.35 * len(per_part) + 1.4)))
        left = pd.Series(0.0, index=per_part.index)
        for part, color in PARTS:
            values = per_part[part] if part in per_part else pd.Series(0.0, index=per_part.index)
            ax.barh(per_part.index, values, left=left, color=color, label=part)
            left = left + values
        ax.invert_yaxis()
        ax.set_xlabel("bubble as share of the pipeline window (%), all groups and iterations")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.set_title("Where in the schedule each stage's bubble lies — " + plain_text(ctx.run_id))
        fig.tight_layout()
        totals = per_part.sum()
        whole = float(totals.sum()) or 1.0
        caption = ("Bubble per stage in the warm-up (before its first backward), the steady "
                   "1F1B state and the cool-down (after its last forward): "
                   + ", ".join(f"{part} {100 * float(totals.get(part, 0)) / whole:.0f} %"
                               for part, _c in PARTS)
                   + " of it. In a healthy 1F1B run nearly all of it is warm-up and cool-down; "
                   "a large steady share means stages wait on each other every microbatch.")
        return save_figure(fig, ctx, "bubbles-parts", "Bubble by schedule part per stage",
                           caption)


FAMILY = BubblesFamily()
