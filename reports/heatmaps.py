"""Rank × iteration heatmaps: step time, compute, exposed communication, idle.

Why heatmaps: a rank slower than its peers is a dark row, a bad iteration a dark column,
and a slow pipeline stage a band; one picture shows all three. The numbers
are ``fct_rank_iterations``' step and its exclusive parts (the run's one
timing source and step rule: GPU kernels, or Megatron's step frames on a
CPU-only run), the same figures every other chart, the headline and
``tracehouse compare`` show.

Readable at any size: up to :data:`~tracehouse.reports.base.MAX_ROWS_PER_AXIS`
ranks, one row per rank, labelled with its coordinates; above that each
iteration becomes a grid with one row per pipeline stage and one cell per
rank of that stage (tp·dp order), or — without stage information — rows of
consecutive ranks. Every rank stays visible as one cell; the caption says
which layout was used and names the worst cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.html import timing_source
from tracehouse.reports.style import apply_theme

#: Above this many cells per panel the values are not written into the cells.
MAX_ANNOTATED_CELLS = 48
#: Values spread less than this fraction of their maximum are drawn as uniform.
UNIFORM_SPREAD = 0.02
#: Above this many iterations the large-run grids show the mean over iterations.
MAX_ITERATION_FACETS = 4


@dataclass(frozen=True)
class Metric:
    """One heatmap: a column of the frame, its title, its colour map and its chart name."""

    column: str
    title: str
    cmap: str
    slug: str


GPU_METRICS = (
    Metric("step_ns", "step time", "YlOrBr", "step"),
    Metric("step_compute_ns", "compute", "Blues", "compute"),
    Metric("step_exposed_communication_ns", "exposed communication", "Reds",
           "exposed-communication"),
    Metric("step_idle_ns", "rank idle", "Greys", "idle"),
)
CPU_METRICS = (
    Metric("step_ns", "step time", "YlOrBr", "step"),
    Metric("step_compute_ns", "fwd + bwd frames", "Blues", "compute"),
    Metric("step_exposed_communication_ns", "p2p + dp-sync frames", "Reds",
           "exposed-communication"),
    Metric("step_optimizer_ns", "optimizer", "Greens", "optimizer"),
)

_SQL = """
    select rank, iteration, step_ns, step_compute_ns, step_exposed_communication_ns,
           step_idle_ns, step_optimizer_ns, pp_stage, tp_rank, cp_rank, dp_rank
    from fct_rank_iterations
    where run_id = $run and step_ns is not null
"""


class HeatmapsFamily:
    """Rank × iteration heatmaps (see the module docstring)."""

    name = "heatmaps"
    title = "Where each rank's time goes, iteration by iteration"
    marts: tuple[str, ...] = ("fct_run_summary", "fct_rank_iterations")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One figure (≤ 64 ranks) or one per metric (more ranks); [] without timings."""
        source = timing_source(ctx.con, ctx.run_id)
        if source == "none":
            return []
        apply_theme()
        metrics = GPU_METRICS if source == "gpu" else CPU_METRICS
        frame = ctx.con.execute(_SQL, {"run": ctx.run_id}).df()
        if frame.empty:
            return []
        frame["iteration_label"] = [
            "whole trace" if pd.isna(it) else f"{int(it)}" for it in frame["iteration"]]
        for metric in metrics:
            frame[metric.column] = frame[metric.column].astype(float) / 1e6  # ms
        where = ("GPU kernels: the GPU step and its parts (fct_rank_iterations)"
                 if source == "gpu" else
                 "CPU step frames: the CPU step and its Megatron frames (fct_rank_iterations; "
                 "this run has no GPU kernels)")
        ranks = frame["rank"].nunique()
        if ranks <= MAX_ROWS_PER_AXIS:
            return [self._small(ctx, frame, metrics, where)]
        return [self._large(ctx, frame, metric, where) for metric in metrics]

    # ------------------------------------------------------------------ ≤ 64 ranks

    def _small(self, ctx: ChartContext, frame: pd.DataFrame, metrics: tuple[Metric, ...],
               where: str) -> RenderedChart:
        labels = _rank_labels(frame)
        iterations = _iteration_order(frame)
        ranks = sorted(frame["rank"].unique())
        cells = len(ranks) * len(iterations)
        annotate = cells <= MAX_ANNOTATED_CELLS
        panel_w = max(2.9, 0.55 * len(iterations) + (1.6 if annotate else 1.2))
        height = max(3.0, 0.28 * len(ranks) + 1.6)
        fig, axes = plt.subplots(1, len(metrics), figsize=(panel_w * len(metrics) + 1.5, height),
                                 sharey=True, squeeze=False)
        worst_notes = []
        grids = {
            metric.column: frame.pivot_table(index="rank", columns="iteration_label",
                                             values=metric.column, aggfunc="sum")
            .reindex(index=ranks, columns=iterations)
            for metric in metrics
        }
        # One scale for the whole figure (see color_range): a panel's colour
        # means the same number of ms as the same tone in its neighbours.
        low, high = color_range(np.concatenate(
            [grid.to_numpy(dtype=float).ravel() for grid in grids.values()]))
        for ax, metric in zip(axes[0], metrics):
            grid = grids[metric.column]
            panel_high = float(np.nanmax(grid.to_numpy(dtype=float), initial=0.0))
            sns.heatmap(grid, ax=ax, cmap=metric.cmap, annot=annotate,
                        fmt=_value_format(panel_high), annot_kws={"fontsize": 7}, linewidths=0.4,
                        linecolor="white", cbar_kws={"label": "ms", "shrink": 0.8},
                        vmin=low, vmax=high)
            ax.set_title(metric.title)
            ax.set_xlabel("iteration")
            ax.set_ylabel("")
            ax.tick_params(axis="x", rotation=0)
            worst = grid.stack().idxmax() if grid.notna().any().any() else None
            if worst is not None and _is_uniform(grid.to_numpy(dtype=float)):
                worst_notes.append(
                    f"{metric.title}: about {grid.loc[worst]:.3g} ms everywhere, worst rank "
                    f"{worst[0]} at iteration {worst[1]} ({grid.loc[worst]:.2f} ms)")
            elif worst is not None:
                worst_notes.append(
                    f"{metric.title}: worst rank {worst[0]} at iteration {worst[1]} "
                    f"({grid.loc[worst]:.2f} ms)")
        axes[0][0].set_yticks(np.arange(len(ranks)) + 0.5)
        axes[0][0].set_yticklabels([labels[r] for r in ranks], rotation=0)
        fig.suptitle(f"Rank × iteration — {ctx.run_id}"
                     + (" (CPU step frames)" if metrics is CPU_METRICS else ""))
        fig.tight_layout()
        caption = (f"One row per rank ({len(ranks)} ranks), one column per traced iteration; "
                   f"values in ms from {where} (compute: compute with no communication "
                   "running, the step's compute part); every panel shares one colour scale, from "
                   f"0 to {high:.3g} ms (darker = more; equal tones are equal times). "
                   "A rank that computes more than its peers is a dark compute row whose "
                   "exposed communication is light (its peers wait for it); a dark column "
                   "is a slow iteration; the worst step time is the slowest rank of "
                   "fct_iteration_summary. " + "; ".join(worst_notes) + ".")
        title = ("Step time, compute, exposed communication and idle per rank and iteration"
                 if metrics is GPU_METRICS else
                 "Step time and time in forward/backward, communication and optimizer frames "
                 "per rank and iteration (CPU)")
        return save_figure(fig, ctx, "heatmaps-rank-iteration", title, caption)

    # ------------------------------------------------------------------ many ranks

    def _large(self, ctx: ChartContext, frame: pd.DataFrame, metric: Metric,
               where: str) -> RenderedChart:
        iterations = _iteration_order(frame)
        if len(iterations) > MAX_ITERATION_FACETS:
            facets = [("mean over iterations",
                       frame.groupby("rank", as_index=False)[metric.column].mean())]
            facet_note = (f"The mean over the {len(iterations)} traced iterations is shown "
                          "(too many to draw one grid each).")
        else:
            facets = [(f"iteration {it}", frame[frame["iteration_label"] == it])
                      for it in iterations]
            facet_note = "One grid per traced iteration."
        ranks_frame = frame.drop_duplicates("rank").set_index("rank")
        by_stage = ranks_frame["pp_stage"].notna().all() and ranks_frame["pp_stage"].nunique() > 1
        layout = _stage_grid(ranks_frame) if by_stage else _square_grid(ranks_frame.index)
        rows, cols = layout.shape
        vmin, vmax = color_range(frame[metric.column].to_numpy(dtype=float))
        panel_w = min(13.0, max(7.0, cols * 0.1 + 2.0))
        panel_h = max(1.6, min(6.0, rows * (panel_w / max(cols, 1)) + 0.9))
        fig, axes = plt.subplots(len(facets), 1, figsize=(panel_w + 1.5, panel_h * len(facets)
                                                          + 0.8), squeeze=False)
        worst_notes = []
        for ax, (facet_title, part) in zip(axes[:, 0], facets):
            values = part.groupby("rank")[metric.column].sum()
            grid = np.full(layout.shape, np.nan)
            for (r, c), rank in np.ndenumerate(layout):
                if rank >= 0 and rank in values.index:
                    grid[r, c] = values.loc[rank]
            sns.heatmap(grid, ax=ax, cmap=metric.cmap, vmin=vmin, vmax=vmax,
                        cbar_kws={"label": "ms"}, xticklabels=False, yticklabels=False)
            ax.set_title(facet_title, fontsize=10)
            if by_stage:
                ax.set_yticks(np.arange(rows) + 0.5)
                ax.set_yticklabels([f"stage {s}" for s in range(rows)], rotation=0)
                ax.set_xlabel(f"ranks of the stage in tp·dp order ({cols} per stage)")
            else:
                step = max(1, rows // 16)
                ax.set_yticks(np.arange(0, rows, step) + 0.5)
                ax.set_yticklabels([f"ranks {int(layout[r, 0])}–" for r in range(0, rows, step)],
                                   rotation=0)
                col_step = max(1, cols // 8)
                ax.set_xticks(np.arange(0, cols, col_step) + 0.5)
                ax.set_xticklabels([f"+{c}" for c in range(0, cols, col_step)], rotation=0)
                ax.set_xlabel(f"+ offset within the row ({cols} ranks per row)")
            if not values.empty and _is_uniform(values.to_numpy(dtype=float)):
                worst_notes.append(f"{facet_title}: about {values.max():.2f} ms on every rank")
            elif not values.empty:
                worst_rank = int(values.idxmax())
                worst_notes.append(f"{facet_title}: worst rank {worst_rank} "
                                   f"({values.max():.2f} ms)")
                r, c = np.argwhere(layout == worst_rank)[0]
                ax.add_patch(plt.Rectangle((c, r), 1, 1, fill=False, edgecolor="black", lw=1.2))
        fig.suptitle(f"{metric.title.capitalize()} per rank — {ctx.run_id} "
                     f"({len(ranks_frame)} ranks)")
        fig.tight_layout()
        how = ("each row is a pipeline stage, each cell one rank of it in tp·dp order"
               if by_stage else f"ranks laid out in rows of {cols} (no pipeline stages known)")
        caption = (f"{len(ranks_frame)} ranks are too many for one row each: {how}. "
                   f"{facet_note} Values in ms from {where}, one colour scale for every grid "
                   f"of the figure, from 0 to {vmax:.3g} ms; the worst cell is boxed. "
                   + "; ".join(worst_notes) + ".")
        slug = "heatmaps-" + metric.slug
        return save_figure(fig, ctx, slug, f"{metric.title.capitalize()} per rank (grid)",
                           caption)


def color_range(values: np.ndarray) -> tuple[float, float]:
    """The colour limits of a figure: from 0 to the largest value of all its panels.

    Why from 0 and shared: a min–max scale per panel paints 1.0 ms and
    1.1 ms as opposite extremes and gives the same tone to 0.008 ms of idle
    and 30 ms of step time. From 0, a tone is a share of the largest value
    in the figure, so a 10 % straggler is a slightly darker row and a 2×
    one a clearly darker row, whatever the panel; the annotations and the
    caption's worst cells give the exact numbers.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    return min(0.0, float(finite.min())), max(float(finite.max()), 1e-6)


def _is_uniform(values: np.ndarray) -> bool:
    """True when the values barely differ (then no cell is singled out as the worst)."""
    finite = values[np.isfinite(values)]
    return finite.size > 0 and float(finite.max() - finite.min()) <= UNIFORM_SPREAD * abs(
        float(finite.max()))


def _value_format(high: float) -> str:
    """Enough decimals that microsecond-sized values (idle) do not all read 0.0."""
    if high >= 100:
        return ".0f"
    if high >= 1:
        return ".1f"
    return ".3f"


def _iteration_order(frame: pd.DataFrame) -> list[str]:
    ordered = frame.drop_duplicates("iteration_label").sort_values(
        "iteration", na_position="last")
    return list(ordered["iteration_label"])


def _rank_labels(frame: pd.DataFrame) -> dict[int, str]:
    """``5 · pp1 tp1 dp0`` where dim_ranks knows the coordinates, else the rank number."""
    labels: dict[int, str] = {}
    for row in frame.drop_duplicates("rank").itertuples():
        text = f"{row.rank}"
        if not pd.isna(row.pp_stage):
            text += f" · pp{int(row.pp_stage)} tp{_int(row.tp_rank)} dp{_int(row.dp_rank)}"
        labels[int(row.rank)] = text
    return labels


def _int(value: object) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))  # type: ignore[arg-type]


def _stage_grid(ranks_frame: pd.DataFrame) -> np.ndarray:
    """Ranks as a (pp stage × tp·dp) matrix; -1 pads stages with fewer ranks."""
    keyed = ranks_frame.reset_index().fillna({"dp_rank": 0, "cp_rank": 0, "tp_rank": 0})
    keyed = keyed.sort_values(["pp_stage", "dp_rank", "cp_rank", "tp_rank", "rank"])
    stages = [group["rank"].to_list() for _, group in keyed.groupby("pp_stage", sort=True)]
    width = max(len(s) for s in stages)
    layout = np.full((len(stages), width), -1, dtype=np.int64)
    for row, members in enumerate(stages):
        layout[row, : len(members)] = members
    return layout


def _square_grid(ranks: pd.Index) -> np.ndarray:
    """Consecutive ranks in rows of a power-of-two width, about as many rows as columns."""
    ordered = sorted(int(r) for r in ranks)
    width = 2 ** math.ceil(math.log2(max(1.0, math.sqrt(len(ordered)))))
    rows = math.ceil(len(ordered) / width)
    layout = np.full((rows, width), -1, dtype=np.int64)
    for i, rank in enumerate(ordered):
        layout[i // width, i % width] = rank
    return layout


FAMILY = HeatmapsFamily()
