"""Pipeline-group Gantt: stages as rows, forward/backward blocks, idle shaded.

What it shows: one pipeline-parallel group of one iteration, one row per
stage (top = stage 0), the forward/backward (and recompute) work of every
microbatch as a block labelled ``microbatch`` or ``microbatch.chunk``
(interleaved schedules: later virtual-pipeline chunks are darker), and the
group's span shaded grey wherever a stage is idle. The title carries the
measured idle share (from fct_pipeline_bubbles, when the warehouse has it)
next to the theoretical bubble (p − 1)/(v·m + p − 1) of 1F1B/interleaved.

Sources, best first: GPU kernels (fct_microbatch_phases, timing_source gpu:
a block spans the microbatch's first to last kernel), else the CPU forward/
backward step frames of CPU-only captures (timing_source cpu). A separate
chart draws the PP-timer logs (fct_pp_timer_events) when a run has them.

Why a few groups only: a 1,024-rank run has dozens of pipelines that look
alike; the first group and the slowest one (largest bubble) tell the story,
and the caption says how many were left out.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import ChartContext, RenderedChart, save_figure
from tracehouse.reports.gantt import (
    BLOCK_PHASES,
    NS_PER_MS,
    GanttRow,
    chunk_columns,
    draw_gantt,
    legend_handles,
    theoretical_bubble,
)
from tracehouse.reports.style import apply_theme

#: Figure width, inches; wide enough for 16+ labelled microbatches per stage.
FIG_WIDTH_IN = 13.0
#: Height of one stage row, inches.
ROW_HEIGHT_IN = 0.42
#: Groups drawn per run at most (the first, most idle, busiest).
MAX_GROUPS = 3

_PHASES_SQL = """
select
    phases.pp_group_index,
    phases.pp_stage,
    phases.pp_size,
    phases.rank,
    phases.iteration,
    phases.phase,
    phases.microbatch,
    {chunks},
    phases.first_start_ns as start_ns,
    phases.last_end_ns as end_ns
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.timing_source = ?
    and phases.iteration = ?
    and phases.microbatch is not null
    and list_contains(?, phases.phase)
    and list_contains(?, phases.pp_group_index)
    and phases.first_start_ns is not null
"""

# Per group of the chosen iteration: its span, to pick the slowest when the
# bubble mart is absent (span of the first to last microbatch block).
_GROUPS_SQL = """
select
    phases.pp_group_index,
    count(distinct phases.rank) as stages,
    max(phases.last_end_ns) - min(phases.first_start_ns) as span_ns
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.timing_source = ?
    and phases.iteration = ?
    and phases.microbatch is not null
    and phases.pp_group_index is not null
group by phases.pp_group_index
order by phases.pp_group_index
"""

_SOURCE_SQL = """
select
    phases.timing_source,
    max(phases.iteration) as last_iteration,
    count(*) as blocks
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.microbatch is not null
    and phases.pp_group_index is not null
    and phases.pp_size > 1
group by phases.timing_source
"""

_BUBBLES_SQL = """
select
    pp_group_index,
    pp_stage,
    rank,
    busy_ns,
    bubble_ns,
    group_span_ns,
    bubble_ratio,
    theoretical_bubble_ratio,
    microbatches,
    vpp_size,
    pp_size
from fct_pipeline_bubbles
where run_id = ? and iteration = ? and timing_source = ?
"""

_TIMER_SQL = """
with events as (
    select
        pp_rank,
        pp_size,
        vpp_size,
        tp_cp_dp_rank,
        rank,
        coalesce(iteration, -1) as iteration,
        vpp_chunk,
        microbatch,
        phase,
        start_ns,
        end_ns
    from fct_pp_timer_events
    where run_id = ?
),

chosen as (
    -- One timeline per stage, as the original: the lowest TPxCPxDP rank of
    -- the last iteration.
    select
        max(iteration) as iteration,
        min(tp_cp_dp_rank) as tp_cp_dp_rank
    from events
)

select events.*
from events
inner join chosen
    on events.iteration = chosen.iteration
    and events.tp_cp_dp_rank is not distinct from chosen.tp_cp_dp_rank
"""


class PipelineFamily:
    """Pipeline-group Gantt charts (GPU kernels or CPU steps, and PP timers)."""

    name = "pipeline"
    title = "Pipeline schedule"
    marts = ("fct_microbatch_phases", "fct_pipeline_bubbles", "fct_pp_timer_events")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """Draw up to two group Gantts from the best source, plus the PP-timer chart."""
        apply_theme()
        charts = self._render_phase_gantts(ctx)
        if ctx.has_table("fct_pp_timer_events"):
            chart = self._render_timer_gantt(ctx)
            if chart is not None:
                charts.append(chart)
        return charts

    # ------------------------------------------------------------------ kernels / cpu steps

    def _render_phase_gantts(self, ctx: ChartContext) -> list[RenderedChart]:
        """One Gantt per chosen PP group, from fct_microbatch_phases."""
        sources = ctx.df(_SOURCE_SQL, [ctx.run_id])
        if sources.empty:
            return []
        # GPU kernels when the traces have them, else CPU step frames.
        source_row = sources.sort_values("timing_source", key=lambda s: s != "gpu").iloc[0]
        source = str(source_row["timing_source"])
        iteration = int(source_row["last_iteration"])
        groups = ctx.df(_GROUPS_SQL, [ctx.run_id, source, iteration])
        if groups.empty:
            return []
        bubbles = self._bubbles(ctx, iteration, source)
        chosen, how = pick_groups(groups, bubbles)
        phases = ctx.df(_PHASES_SQL.format(chunks=chunk_columns(ctx, "fct_microbatch_phases",
                                                                "phases")),
                        [ctx.run_id, source, iteration, list(BLOCK_PHASES), chosen])
        charts = []
        for group in chosen:
            data = phases[phases["pp_group_index"] == group]
            if data.empty:
                continue
            group_bubbles = (bubbles[bubbles["pp_group_index"] == group]
                             if bubbles is not None else None)
            fig, title = draw_group(data, group_bubbles, f"PP group {group}", iteration)
            what = ("GPU kernels (a block spans the microbatch's first to last kernel)"
                    if source == "gpu" else
                    "CPU forward/backward step frames (these traces hold no GPU kernels)")
            caption = (f"Source: {what}; iteration {iteration}; rows are the group's stages, "
                       f"blocks labelled microbatch{'.chunk' if _chunks(data) > 1 else ''}, "
                       f"grey hatching is idle. {how}"
                       + (" Idle shares (title: the group; right: each stage) from "
                          "fct_pipeline_bubbles: 1 − busy / (p × group window), busy = union of "
                          + ("the stage's forward/backward compute kernels, so waiting on "
                             "communication inside a block counts as idle too."
                             if source == "gpu" else "the stage's forward/backward step frames.")
                          if group_bubbles is not None and not group_bubbles.empty else
                          " No fct_pipeline_bubbles in this warehouse: measured idle share"
                          " omitted."))
            charts.append(save_figure(fig, ctx, f"pipeline_{source}_group{group}", title, caption))
        return charts

    def _bubbles(self, ctx: ChartContext, iteration: int, source: str) -> pd.DataFrame | None:
        """Rows of fct_pipeline_bubbles for the iteration, None when the mart is absent."""
        if not ctx.has_table("fct_pipeline_bubbles"):
            return None
        return ctx.df(_BUBBLES_SQL, [ctx.run_id, iteration, source])

    # ------------------------------------------------------------------ PP timer logs

    def _render_timer_gantt(self, ctx: ChartContext) -> RenderedChart | None:
        """Gantt of one DP/TP slice's PP-timer events (one row per pp_rank)."""
        events = ctx.df(_TIMER_SQL, [ctx.run_id])
        if events.empty:
            return None
        pp_size = int(events["pp_size"].max())
        vpp_size = int(events["vpp_size"].fillna(1).max())
        chunks = max(vpp_size, 1)
        iteration = int(events["iteration"].iloc[0])
        forward = events[events["phase"] == "forward"]
        per_stage = forward.groupby("pp_rank").size()
        steps = int(per_stage.max()) if not per_stage.empty else 0
        theory = theoretical_bubble(pp_size, steps)
        t0 = int(events["start_ns"].min())
        t1 = int(events["end_ns"].max())
        busy = int((events["end_ns"] - events["start_ns"]).sum())
        stages = sorted(int(stage) for stage in events["pp_rank"].dropna().unique())
        idle_share = 1 - busy / (len(stages) * (t1 - t0)) if t1 > t0 and stages else None
        rows = []
        for stage in stages:
            stage_events = events[events["pp_rank"] == stage]
            rank = stage_events["rank"].dropna()
            label = f"stage {stage}" + (f" · rank {int(rank.iloc[0])}" if not rank.empty else "")
            rows.append(GanttRow(key=stage, label=label, start_ns=t0, end_ns=t1))
        blocks = events.rename(columns={"pp_rank": "row_key", "microbatch": "chunk_microbatch"})
        fig, ax, width_in = _figure(len(rows))
        draw_gantt(ax, rows, blocks, t0, width_in, chunks=chunks)
        ax.set_xlabel("ms since the timer start (post-barrier)")
        parts = [f"PP timer · iteration {iteration if iteration >= 0 else '?'} · "
                 f"{schedule_name(chunks)}"]
        if idle_share is not None:
            parts.append(f"idle {idle_share:.1%}")
        if theory is not None:
            parts.append(_theory_text(pp_size, chunks, steps, theory))
        title = " · ".join(parts)
        ax.set_title(two_line_title(parts), loc="left")
        legend_below(ax, sorted(set(events["phase"]) & set(BLOCK_PHASES),
                                key=BLOCK_PHASES.index), chunks)
        tp_cp_dp = events["tp_cp_dp_rank"].dropna()
        caption = ("Source: Megatron PP-timer logs (event_times_PP*.json), one timeline per "
                   "pipeline stage for TPxCPxDP rank "
                   f"{int(tp_cp_dp.iloc[0]) if not tp_cp_dp.empty else '?'}; times are relative "
                   "to each rank's post-barrier timer start. Idle share = 1 − Σ block time / "
                   "(stages × span), which counts warm-up waiting, P2P and the tail.")
        return save_figure(fig, ctx, "pipeline_pp_timer", title, caption)


def _chunks(data: pd.DataFrame) -> int:
    """Number of virtual-pipeline chunks in ``data`` (1 when the mart does not say)."""
    chunk = data["vpp_chunk"].dropna()
    return int(chunk.max()) + 1 if not chunk.empty else 1


def known_chunks(data: pd.DataFrame, bubbles: pd.DataFrame | None) -> int | None:
    """v: from fct_pipeline_bubbles, else from vpp_chunk, else None (unknown).

    fct_microbatch_phases leaves vpp_chunk NULL both without VPP and where
    the chunk is not derived; only with the column filled, or the bubble
    mart's vpp_size, is v known.
    """
    if bubbles is not None and not bubbles.empty and bubbles["vpp_size"].notna().any():
        return int(bubbles["vpp_size"].max())
    if data["vpp_chunk"].notna().any():
        return _chunks(data)
    return None


def _theory_text(pp_size: int, chunks: int | None, steps: int, theory: float) -> str:
    """``theoretical bubble (p−1)/(v·m+p−1) = 3/(2·8+3) = 15.8%`` with the numbers filled in.

    ``chunks`` None means the mart does not say v: the formula then shows
    v·m as the counted forward steps per stage.
    """
    if chunks is None:
        formula = f"(p−1)/(v·m+p−1) = {pp_size - 1}/({steps}+{pp_size - 1})"
    elif chunks > 1:
        formula = (f"(p−1)/(v·m+p−1) = {pp_size - 1}/({chunks}·{steps // chunks}"
                   f"+{pp_size - 1})")
    else:
        formula = f"(p−1)/(m+p−1) = {pp_size - 1}/({steps}+{pp_size - 1})"
    return f"theoretical bubble {formula} = {theory:.1%}"


def two_line_title(parts: list[str]) -> str:
    """What is drawn on the first line, the bubble figures on the second (fits 13 in)."""
    return parts[0] + ("\n" + " · ".join(parts[1:]) if len(parts) > 1 else "")


def schedule_name(chunks: int | None) -> str:
    """``1F1B``, ``interleaved 1F1B (v=2)``, or ``1F1B or interleaved`` when v is unknown."""
    if chunks is None:
        return "1F1B or interleaved (v not in the warehouse)"
    return f"interleaved 1F1B (v={chunks})" if chunks > 1 else "1F1B"


def _figure(rows: int) -> tuple[plt.Figure, plt.Axes, float]:
    """A wide figure for ``rows`` Gantt rows and the axis width in inches."""
    height = max(2.2, ROW_HEIGHT_IN * rows + 1.4)
    fig, ax = plt.subplots(figsize=(FIG_WIDTH_IN, height))
    fig.subplots_adjust(left=0.12, right=0.93, top=1 - 0.75 / height, bottom=0.85 / height)
    width_in = FIG_WIDTH_IN * ax.get_position().width
    return fig, ax, width_in


def legend_below(ax: plt.Axes, phases: list[str], chunks: int) -> None:
    """Legend in one row under the x label, outside the data, at any figure height."""
    handles = legend_handles(phases, chunks)
    axes_height_in = ax.figure.get_size_inches()[1] * ax.get_position().height
    ax.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
              bbox_to_anchor=(0.5, -0.42 / axes_height_in))


def pick_groups(groups: pd.DataFrame, bubbles: pd.DataFrame | None) -> tuple[list[int], str]:
    """The PP groups to draw and a caption sentence saying which and why.

    All groups when there are at most :data:`MAX_GROUPS`. Otherwise the first
    group, then, with fct_pipeline_bubbles rows, the group with the largest
    idle share (most bubble) and the one with the most busy time (its stages
    work longest: where a straggler sits, since its peers wait on it in other
    groups' bubbles too); without them, the group whose microbatch blocks
    span longest. Duplicates collapse, so 1 to 3 groups come back.
    """
    indexes = [int(group) for group in groups["pp_group_index"]]
    if len(indexes) <= MAX_GROUPS:
        return indexes, f"All {len(indexes)} PP group(s) of the run drawn."
    picks: list[tuple[int, str]] = [(indexes[0], "the first")]
    if bubbles is not None and not bubbles.empty:
        per_group = bubbles.groupby("pp_group_index").agg(
            bubble=("bubble_ns", "sum"), span=("group_span_ns", "sum"), busy=("busy_ns", "sum"))
        ratio = per_group["bubble"] / per_group["span"].where(per_group["span"] > 0)
        if ratio.notna().any():
            picks.append((int(ratio.idxmax()), "the largest idle share"))
        if per_group["busy"].notna().any():
            picks.append((int(per_group["busy"].idxmax()), "the most busy time"))
    else:
        longest = groups.sort_values(["span_ns", "pp_group_index"], ascending=[False, True])
        picks.append((int(longest.iloc[0]["pp_group_index"]), "the longest span"))
    chosen: list[int] = []
    reasons: dict[int, list[str]] = {}
    for group, reason in picks:
        if group not in chosen:
            chosen.append(group)
        reasons.setdefault(group, []).append(reason)
    described = "; ".join(f"group {group} ({' and '.join(reasons[group])})" for group in chosen)
    return chosen, (f"{len(indexes)} PP groups in the run: drawn {described}; "
                    "the others are left out.")


def draw_group(data: pd.DataFrame, bubbles: pd.DataFrame | None, name: str,
               iteration: int) -> tuple[plt.Figure, str]:
    """Draw one PP group's Gantt from fct_microbatch_phases rows; returns (figure, title).

    ``data`` holds one group's rows (pp_stage, rank, phase, vpp_chunk,
    chunk_microbatch, start_ns, end_ns, pp_size); ``bubbles`` its
    fct_pipeline_bubbles rows or None.
    """
    chunks = _chunks(data)
    t0 = int(data["start_ns"].min())
    t1 = int(data["end_ns"].max())
    stage_ranks = (data.groupby("pp_stage")["rank"].min().sort_index())
    stage_note: dict[int, str] = {}
    if bubbles is not None and not bubbles.empty:
        for row in bubbles.itertuples(index=False):
            if pd.notna(row.bubble_ratio):
                stage_note[int(row.pp_stage)] = f"idle {row.bubble_ratio:.0%}"
    rows = [GanttRow(key=int(stage), label=f"stage {int(stage)} · rank {int(rank)}",
                     start_ns=t0, end_ns=t1, note=stage_note.get(int(stage), ""))
            for stage, rank in stage_ranks.items()]
    blocks = data.rename(columns={"pp_stage": "row_key"})
    fig, ax, width_in = _figure(len(rows))
    draw_gantt(ax, rows, blocks, t0, width_in, chunks=chunks)
    ax.set_xlabel("ms since the group's first microbatch")
    pp_size = int(data["pp_size"].max()) if data["pp_size"].notna().any() else len(rows)
    forward = data[data["phase"] == "forward"].groupby("pp_stage").size()
    steps = int(forward.max()) if not forward.empty else 0
    known = known_chunks(data, bubbles)
    parts = [f"{name} · iteration {iteration} · {schedule_name(known)}"]
    theory = theoretical_bubble(pp_size, steps)
    if bubbles is not None and not bubbles.empty:
        span = bubbles["group_span_ns"].sum()
        if span > 0:
            parts.append(f"idle {bubbles['bubble_ns'].sum() / span:.1%}")
        marts_theory = bubbles["theoretical_bubble_ratio"].dropna()
        if not marts_theory.empty:
            theory = float(marts_theory.iloc[0])
    if theory is not None:
        parts.append(_theory_text(pp_size, known, steps, theory))
    title = " · ".join(parts)
    ax.set_title(two_line_title(parts), loc="left")
    present = [phase for phase in BLOCK_PHASES if phase in set(data["phase"])]
    legend_below(ax, present, chunks)
    return fig, title


FAMILY = PipelineFamily()

__all__ = ["FAMILY", "NS_PER_MS", "PipelineFamily", "draw_group", "pick_groups"]
