"""Why the GPU sat idle, per rank: host wait, kernel wait, other (as HTA defines them).

Why: "idle 30 %" alone does not say what to fix. ``fct_idle_breakdown``
splits each stream's gaps the way Holistic Trace Analysis does: *host wait*
(the next kernel was launched only after the previous one ended: the CPU
cannot keep up, so look at the dataloader, Python overhead, syncs), *kernel
wait* (short gaps between back-to-back kernels: launch overhead, so fuse or
use CUDA graphs) and *other* (the stream waits on something else: an event,
another stream, a collective's peer). One stacked bar per rank (streams
summed), or per pipeline stage (mean per rank) beyond 64 ranks; the caption
adds the launch statistics of ``fct_kernel_launches``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import IDLE_COLOR, apply_theme

#: Categories in stacking order, each with a fixed colour and a label.
CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("host_wait", "#d62728", "host wait (launched after the previous kernel ended)"),
    ("kernel_wait", "#ff7f0e", "kernel wait (launch overhead between kernels)"),
    ("other", IDLE_COLOR, "other (waiting on an event, stream or peer)"),
)

_SQL = """
    select idle.rank, idle.pp_stage, idle.idle_category, sum(idle.idle_ns) as idle_ns
    from fct_idle_breakdown as idle
    where idle.run_id = ?
    group by all
"""
_LAUNCH_SQL = """
    select
        count(*) as launches,
        median(launch_delay_ns) as median_delay_ns,
        avg(case when is_launch_delay_outlier then 1.0 else 0.0 end) as delay_outliers,
        avg(case when is_short_kernel then 1.0 else 0.0 end) as short_kernels
    from fct_kernel_launches where run_id = ?
"""


class IdleFamily:
    """Idle time per rank by cause (see the module docstring)."""

    name = "idle"
    title = "Why each GPU stream sat idle (host wait, kernel wait, other)"
    marts: tuple[str, ...] = ("fct_idle_breakdown", "fct_kernel_launches")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One stacked bar chart; [] when the run has no GPU streams."""
        if not ctx.has_table("fct_idle_breakdown"):
            return []
        frame = ctx.df(_SQL, [ctx.run_id])
        if frame.empty:
            return []
        apply_theme()
        ranks = frame["rank"].nunique()
        if ranks > MAX_ROWS_PER_AXIS and frame["pp_stage"].notna().any():
            frame["row"] = "stage " + frame["pp_stage"].astype("Int64").astype(str)
            by_stage = True
        else:
            frame["row"] = "rank " + frame["rank"].astype(str)
            by_stage = False
        grid = frame.pivot_table(index="row", columns="idle_category", values="idle_ns",
                                 aggfunc="sum").fillna(0.0) / 1e6
        if by_stage:
            counts = frame.groupby("row")["rank"].nunique()
            grid = grid.div(counts, axis=0)
        order = sorted(grid.index, key=lambda label: int(label.split()[-1]))
        grid = grid.reindex(order)
        fig, ax = plt.subplots(figsize=(8.5, max(2.5, 0.3 * len(grid) + 1.4)))
        left = pd.Series(0.0, index=grid.index)
        for category, color, label in CATEGORIES:
            values = grid[category] if category in grid else pd.Series(0.0, index=grid.index)
            ax.barh(grid.index, values, left=left, color=color, label=label)
            left = left + values
        ax.invert_yaxis()
        ax.set_xlabel("stream idle (ms, summed over the rank's streams"
                      + (", mean per rank)" if by_stage else ")"))
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.set_title("Stream idle by cause — " + plain_text(ctx.run_id))
        totals = grid.sum()
        whole = float(totals.sum()) or 1.0
        shares = ", ".join(
            f"{name.replace('_', ' ')} {100 * float(totals.get(name, 0)) / whole:.0f} %"
            for name, _c, _l in CATEGORIES)
        caption = (f"Stream idle: gaps between kernels on each CUDA stream, by cause ({shares}), "
                   "as Holistic Trace Analysis' idle-time breakdown defines them "
                   "(fct_idle_breakdown), summed over the rank's streams, so it can exceed "
                   "the step. Not the rank idle of the headline and heatmaps "
                   "(fct_rank_iterations.step_idle_ns: no kernel on any stream), which is a "
                   "part of the step.")
        launch = ctx.con.execute(_LAUNCH_SQL, [ctx.run_id]).fetchone()
        if launch and launch[0]:
            caption += (f" Launches (fct_kernel_launches): {launch[0]:,} kernels, median launch "
                        f"delay {float(launch[1]) / 1e3:.1f} µs, {100 * float(launch[2]):.1f} % "
                        f"delayed over 100 µs, {100 * float(launch[3]):.1f} % shorter than "
                        "their launch call.")
        fig.tight_layout()
        return [save_figure(fig, ctx, "idle-breakdown", "Stream idle by cause per rank",
                            caption)]


FAMILY = IdleFamily()
