"""Compute, communication, overlap and idle per microbatch and phase.

What it shows: Megatron-TraceViz's "comm_comp_overlap" bars, from
fct_microbatch_phases. For each forward/backward microbatch one stacked bar
whose height is the microbatch's wall time, split into compute only,
compute overlapped with communication, communication only, memory only and
idle (wall with no kernel running: the original's dotted gap). Phases
without microbatches (pp_p2p, dp_sync, optimizer, other) get a panel of
their own, per iteration, since one of them spans far more time than a
microbatch and would flatten the others.

Aggregation: rows of panels are pipeline stages (all ranks in one row when
the run has no pipeline topology; at most ``MAX_STAGE_ROWS`` stages: the
first, the last and the slowest). A bar is the mean over the row's ranks and
iterations, so its parts still add up to the mean wall time; a black tick
marks the slowest rank's wall time, which a mean would hide.

CPU-only captures (timing_source cpu) have no kernels: a bar is then the
step frames' busy CPU time plus idle, and the caption says so.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.gantt import BLOCK_PHASES, NS_PER_MS, block_label, chunk_columns
from tracehouse.reports.style import IDLE_COLOR, KIND_COLORS, apply_theme, phase_color

#: Stage rows drawn at most; more stages are reduced to first, last, slowest.
MAX_STAGE_ROWS = 4
FIG_WIDTH_IN = 13.0
ROW_HEIGHT_IN = 2.4

#: Parts of a GPU bar, bottom to top, with their colours and legend labels.
GPU_PARTS: tuple[tuple[str, str, str], ...] = (
    ("compute_only_ms", KIND_COLORS["compute"], "compute only"),
    ("overlap_ms", KIND_COLORS["overlap"], "compute ∩ communication"),
    ("communication_only_ms", KIND_COLORS["communication"], "communication only"),
    ("memory_only_ms", KIND_COLORS["memory"], "memory only"),
    ("idle_ms", IDLE_COLOR, "idle (no kernel)"),
)

_PHASES_SQL = """
select
    phases.rank,
    phases.iteration,
    phases.phase,
    phases.microbatch,
    {chunks},
    phases.timing_source,
    phases.pp_stage,
    phases.wall_ns,
    phases.busy_ns,
    phases.compute_ns,
    phases.communication_ns,
    phases.overlap_ns
from fct_microbatch_phases as phases
where phases.run_id = ? and phases.timing_source = ? and phases.wall_ns is not null
    -- kernels launched outside every ProfilerStep belong to no iteration
    and phases.iteration is not null
"""

_SOURCE_SQL = """
select timing_source
from fct_microbatch_phases
where run_id = ?
group by timing_source
order by timing_source = 'gpu' desc
limit 1
"""


class MicrobatchFamily:
    """Stacked compute / communication / overlap / idle bars per microbatch and phase."""

    name = "microbatch"
    title = "Microbatches: compute, communication, overlap, idle"
    marts = ("fct_microbatch_phases")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One chart: rows of stages, a panel per microbatch phase plus per-iteration phases."""
        apply_theme()
        source_df = ctx.df(_SOURCE_SQL, [ctx.run_id])
        if source_df.empty:
            return []
        source = str(source_df.iloc[0]["timing_source"])
        data = ctx.df(_PHASES_SQL.format(chunks=chunk_columns(ctx, "fct_microbatch_phases",
                                                              "phases")),
                      [ctx.run_id, source])
        if data.empty:
            return []
        data = add_parts(data, source)
        stages, how = pick_stages(data)
        fig, title = draw(data, stages, source)
        sources = ("GPU kernels (wall = first to last kernel of the group)" if source == "gpu"
                   else "CPU step frames (these traces hold no GPU kernels): busy = CPU time of "
                        "the step frames, idle = the rest of the wall time")
        iterations = sorted(int(value) for value in data["iteration"].dropna().unique())
        if data["microbatch"].notna().any():
            caption = (f"Source: {sources}. Each bar is the mean over the row's ranks and "
                       f"iterations ({_iteration_text(iterations)}); its parts add up to the "
                       f"mean wall time. Black ticks: the slowest rank's wall time. {how}")
        else:
            caption = (f"Source: {sources}. The run has no Megatron forward/backward steps, so "
                       "bars are per rank and phase: the mean over "
                       f"{_iteration_text(iterations)}; black ticks: the rank's longest "
                       "iteration. Kernels outside every profiler step are left out.")
        return [save_figure(fig, ctx, f"microbatch_{source}", title, caption)]


def _iteration_text(iterations: list[int]) -> str:
    """``iteration 3`` / ``iterations 1-2`` / ``no iteration``."""
    if not iterations:
        return "no iteration"
    if len(iterations) == 1:
        return f"iteration {iterations[0]}"
    return f"iterations {iterations[0]}-{iterations[-1]} ({len(iterations)})"


def add_parts(data: pd.DataFrame, source: str) -> pd.DataFrame:
    """Add the bar parts in ms; they sum to wall_ms by construction.

    Python only splits the mart's columns (no interval arithmetic here):
    compute only = compute − overlap, communication only = communication −
    overlap, memory only = busy − (compute ∪ communication), idle = wall − busy.
    """
    data = data.copy()
    for column in ("wall_ns", "busy_ns", "compute_ns", "communication_ns", "overlap_ns"):
        data[column] = pd.to_numeric(data[column], errors="coerce").astype(float)
    data["wall_ms"] = data["wall_ns"] / NS_PER_MS
    data["idle_ms"] = (data["wall_ns"] - data["busy_ns"].fillna(0)).clip(lower=0) / NS_PER_MS
    if source == "gpu":
        compute = data["compute_ns"].fillna(0)
        communication = data["communication_ns"].fillna(0)
        overlap = data["overlap_ns"].fillna(0)
        data["compute_only_ms"] = (compute - overlap) / NS_PER_MS
        data["overlap_ms"] = overlap / NS_PER_MS
        data["communication_only_ms"] = (communication - overlap) / NS_PER_MS
        union = compute + communication - overlap
        data["memory_only_ms"] = (data["busy_ns"].fillna(0) - union).clip(lower=0) / NS_PER_MS
    else:
        data["busy_ms"] = data["busy_ns"].fillna(0) / NS_PER_MS
    data["stage_key"] = data["pp_stage"].astype("Int64")
    return data


def pick_stages(data: pd.DataFrame) -> tuple[list[int | None], str]:
    """Stage rows to draw and a caption sentence; [None] means all ranks in one row."""
    stages = sorted(int(stage) for stage in data["stage_key"].dropna().unique())
    if len(stages) <= 1:
        return [None], f"All {data['rank'].nunique()} ranks in one row (no pipeline stages)."
    if len(stages) <= MAX_STAGE_ROWS:
        return list(stages), f"One row per pipeline stage ({len(stages)})."
    per_stage = (data[data["microbatch"].notna()].groupby("stage_key")["wall_ms"].sum()
                 / data.groupby("stage_key")["rank"].nunique())
    chosen = [stages[0], stages[-1]]
    for stage in per_stage.sort_values(ascending=False).index:
        if len(chosen) >= MAX_STAGE_ROWS:
            break
        if int(stage) not in chosen:
            chosen.append(int(stage))
    chosen = sorted(chosen)
    return chosen, (f"{len(stages)} pipeline stages: drawn stages {', '.join(map(str, chosen))} "
                    "(first, last and the slowest by microbatch wall time per rank).")


def draw(data: pd.DataFrame, stages: list[int | None], source: str) -> tuple[plt.Figure, str]:
    """Draw the grid of panels; returns (figure, title)."""
    mb_phases = [phase for phase in BLOCK_PHASES
                 if not data[(data["phase"] == phase) & data["microbatch"].notna()].empty]
    other = data[data["microbatch"].isna()]
    other_phases = sorted(other["phase"].dropna().unique(),
                          key=lambda phase: (phase == "other", phase))
    if not mb_phases:
        return _draw_per_rank(data, other_phases, source)
    columns: list[str] = mb_phases + (["__iteration__"] if other_phases else [])
    microbatches = max(int(data["microbatch"].max()) + 1 if data["microbatch"].notna().any()
                       else 1, 1)
    widths = [max(microbatches, 4) for _ in mb_phases] + (
        [max(len(other_phases) * 1.5, 3)] if other_phases else [])
    height = ROW_HEIGHT_IN * len(stages) + 1.4
    fig, axes = plt.subplots(len(stages), len(columns), figsize=(FIG_WIDTH_IN, height),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.7 / height, bottom=1.0 / height,
                        wspace=0.18, hspace=0.35)
    parts = GPU_PARTS if source == "gpu" else (("busy_ms", None, "busy (CPU step frames)"),
                                               ("idle_ms", IDLE_COLOR, "idle"))
    for row, stage in enumerate(stages):
        rows = data if stage is None else data[data["stage_key"] == stage]
        mb_axes = []
        for column, phase in enumerate(columns):
            ax = axes[row][column]
            if phase == "__iteration__":
                subset = rows[rows["microbatch"].isna()]
                _bars(ax, subset, "phase", other_phases, parts, source)
                ax.set_title("per-iteration phases"
                             + ("" if stage is None else f" · stage {stage}"),
                             loc="left", fontsize=9)
                ax.tick_params(axis="x", labelrotation=30)
            else:
                subset = rows[(rows["phase"] == phase) & rows["microbatch"].notna()]
                keys = sorted(int(value) for value in subset["microbatch"].unique())
                _bars(ax, subset, "microbatch", keys, parts, source, phase=phase)
                ax.set_title(f"{phase}" + ("" if stage is None else f" · stage {stage}"),
                             loc="left", fontsize=9, color=phase_color(phase))
                chunked = subset["vpp_chunk"].notna().any()
                ax.set_xlabel(("microbatch.chunk" if chunked else "microbatch")
                              if row == len(stages) - 1 else "")
                mb_axes.append(ax)
            if column == 0:
                ax.set_ylabel("ms" if stage is None else f"stage {stage}\nms")
        if len(mb_axes) > 1:
            top = max(ax.get_ylim()[1] for ax in mb_axes)
            for ax in mb_axes:
                ax.set_ylim(0, top)
    _legend(fig, parts)
    what = "GPU kernels" if source == "gpu" else "CPU step frames"
    title = f"Microbatches: compute, communication, overlap and idle ({what})"
    if source != "gpu":
        title = f"Microbatches: CPU busy and idle per microbatch ({what})"
    fig.suptitle(title, x=0.07, ha="left")
    return fig, title


def _draw_per_rank(data: pd.DataFrame, phases: list[str],
                   source: str) -> tuple[plt.Figure, str]:
    """Runs without microbatches (no Megatron step frames): one panel per phase, x = rank.

    Above ``MAX_ROWS_PER_AXIS`` ranks, that many ranks evenly spaced by wall
    time are drawn, slowest first.
    """
    per_rank = data.groupby("rank")["wall_ms"].sum().sort_values(ascending=False)
    ranks = sorted(int(rank) for rank in per_rank.index)
    if len(ranks) > MAX_ROWS_PER_AXIS:
        positions = sorted({round(i * (len(per_rank) - 1) / (MAX_ROWS_PER_AXIS - 1))
                            for i in range(MAX_ROWS_PER_AXIS)})
        ranks = [int(rank) for rank in per_rank.index[positions]]
    height = 3.6
    fig, axes = plt.subplots(1, len(phases), figsize=(FIG_WIDTH_IN, height), squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.75 / height, bottom=1.1 / height,
                        wspace=0.2)
    parts = GPU_PARTS if source == "gpu" else (("busy_ms", None, "busy (CPU step frames)"),
                                               ("idle_ms", IDLE_COLOR, "idle"))
    for column, phase in enumerate(phases):
        ax = axes[0][column]
        subset = data[(data["phase"] == phase) & data["rank"].isin(ranks)]
        _bars(ax, subset, "rank", ranks, parts, source, phase=phase)
        ax.set_title(f"phase {phase}", loc="left", fontsize=9)
        ax.set_xlabel("rank" + (f" ({len(ranks)} of {len(per_rank)}, evenly spaced by wall time)"
                                if len(ranks) < len(per_rank) else ""))
        if column == 0:
            ax.set_ylabel("ms per iteration")
    _legend(fig, parts, "longest iteration's wall")
    title = "Per-rank compute, communication, overlap and idle (no microbatches in this run)"
    fig.suptitle(title, x=0.07, ha="left")
    return fig, title


def _legend(fig: plt.Figure, parts: tuple, tick_label: str = "slowest rank's wall") -> None:
    """The parts' legend plus the slowest-rank tick, along the bottom of the figure."""
    handles = [Patch(facecolor=color or phase_color("forward"), label=label,
                     hatch="////" if label.startswith("idle") else None,
                     edgecolor="#b0b0b0" if label.startswith("idle") else "none")
               for _, color, label in parts]
    handles.append(plt.Line2D([], [], color="black", marker="_", linestyle="none",
                              markersize=10, label=tick_label))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False,
               bbox_to_anchor=(0.5, 0.0))


def _bars(ax: plt.Axes, subset: pd.DataFrame, key: str, keys: list, parts: tuple,
          source: str, phase: str | None = None) -> None:
    """Stacked mean bars over ``keys`` plus the per-key maximum wall as a tick."""
    if subset.empty or not keys:
        ax.set_visible(False)
        return
    columns = [part for part, _, _ in parts]
    means = subset.groupby(key)[columns].mean().reindex(keys).fillna(0)
    worst = subset.groupby(key)["wall_ms"].max().reindex(keys)
    x = np.arange(len(keys))
    bottom = np.zeros(len(keys))
    width = 0.8
    for part, color, label in parts:
        values = means[part].to_numpy()
        face = color
        if face is None:  # CPU busy: the phase colour
            face = phase_color(phase) if phase else [phase_color(k) for k in keys]
        ax.bar(x, values, bottom=bottom, width=width, color=face, linewidth=0,
               hatch="////" if label.startswith("idle") else None,
               edgecolor="#b0b0b0" if label.startswith("idle") else "none")
        bottom = bottom + values
    ax.scatter(x, worst.to_numpy(), marker="_", color="black", s=60 * width, linewidths=1.2,
               zorder=3)
    labels = [str(k) for k in keys]
    if key == "microbatch" and subset["vpp_chunk"].notna().any():
        # The flat microbatch index runs over chunks; say which chunk's which microbatch.
        firsts = subset.drop_duplicates("microbatch").set_index("microbatch")
        chunks = int(subset["vpp_chunk"].max()) + 1
        labels = [block_label(firsts.at[k, "chunk_microbatch"], firsts.at[k, "vpp_chunk"], chunks)
                  for k in keys]
    step = max(1, -(-len(keys) // 16))  # at most 16 labels per panel
    ax.set_xticks(x[::step], labels[::step])
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylim(bottom=0)
    ax.grid(axis="x", visible=False)
    del source


FAMILY = MicrobatchFamily()
