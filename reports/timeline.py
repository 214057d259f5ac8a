"""Rank timeline: kernel kinds per rank over wall-clock time, one iteration.

What it shows: for each drawn rank, three thin lanes (compute,
communication, memory) holding that kind's busy intervals, on top of faint
bands marking each forward/backward microbatch (labelled ``F3`` / ``B3``).
It is Megatron-TraceViz's "overlapping timeline", redrawn: the original
nested every category's bars inside each other at different heights, which
became unreadable once more than three categories overlapped; separate lanes
show overlap as bars stacked vertically at the same x.

Why intervals are merged in SQL: a run holds millions of kernels, and one
matplotlib artist per kernel takes minutes and produces a useless SVG. The
query merges each rank x kind's kernels into islands (gaps shorter than
``1 / MERGE_RESOLUTION`` of the iteration's span are closed, well below a
pixel) and draws each lane with one ``broken_barh``.

At scale: above ``MAX_ROWS`` ranks the chart shows representative
ranks (the slowest, median and fastest rank of each pipeline stage by the
iteration's span) and says so in the caption. CPU-only captures (no kernels)
get their forward/backward step frames instead.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import Patch

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.gantt import (
    BLOCK_PHASES,
    NS_PER_MS,
    block_label,
    chunk_columns,
    shade,
    text_color,
)
from tracehouse.reports.style import apply_theme, kind_color, phase_color

#: Ranks drawn at most. Half the report-wide limit: each row holds three
#: lanes, so 32 rows already make a tall figure.
MAX_ROWS = MAX_ROWS_PER_AXIS // 2
#: Kinds drawn as lanes, top to bottom.
LANES: tuple[str, ...] = ("compute", "communication", "memory")
#: Gaps shorter than span / MERGE_RESOLUTION are closed when merging intervals.
MERGE_RESOLUTION = 4000
FIG_WIDTH_IN = 13.0
ROW_HEIGHT_IN = 0.55
BAND_LABEL_PT = 5.5

_ITERATION_SQL = """
select
    iteration,
    count(*) as ranks,
    min(first_start_ns) as first_start_ns,
    max(last_end_ns) as last_end_ns
from fct_rank_iterations
where run_id = ? and iteration is not null and span_ns is not null
group by iteration
order by ranks desc, iteration desc
limit 1
"""

_RANKS_SQL = """
select
    iterations.rank,
    iterations.span_ns,
    iterations.compute_ns as load_ns,
    iterations.first_start_ns,
    iterations.pp_stage,
    iterations.tp_rank,
    iterations.dp_rank,
    iterations.pp_group_index
from fct_rank_iterations as iterations
where iterations.run_id = ? and iterations.iteration = ? and iterations.span_ns is not null
order by iterations.rank
"""

# Gaps-and-islands per rank x kind: a kernel starts a new island when it
# begins more than ? ns after every earlier kernel of the lane has ended.
_MERGED_SQL = """
with kernels as (
    select
        rank,
        kind,
        ts_ns as start_ns,
        end_ns
    from fct_kernels
    where run_id = ? and iteration = ? and list_contains(?, rank) and dur_ns >= 0
),

flagged as (
    select
        *,
        max(end_ns) over (
            partition by rank, kind order by start_ns, end_ns
            rows between unbounded preceding and 1 preceding
        ) as previous_end_ns
    from kernels
),

numbered as (
    select
        *,
        sum(case when previous_end_ns is null or start_ns > previous_end_ns + ? then 1 else 0 end)
            over (partition by rank, kind order by start_ns, end_ns rows unbounded preceding)
            as island
    from flagged
)

select
    rank,
    kind,
    min(start_ns) as start_ns,
    max(end_ns) as end_ns
from numbered
group by rank, kind, island
"""

_BANDS_SQL = """
select
    phases.rank,
    phases.phase,
    phases.microbatch,
    {chunks},
    phases.first_start_ns as start_ns,
    phases.last_end_ns as end_ns
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.iteration = ?
    and phases.timing_source = ?
    and list_contains(?, phases.rank)
    and list_contains(?, phases.phase)
    and phases.microbatch is not null
    and phases.first_start_ns is not null
"""

_CPU_ITERATION_SQL = """
select
    iteration,
    count(distinct rank) as ranks
from fct_microbatch_phases
where run_id = ? and timing_source = 'cpu' and microbatch is not null
group by iteration
order by ranks desc, iteration desc
limit 1
"""

_CPU_RANKS_SQL = """
select
    phases.rank,
    max(phases.last_end_ns) - min(phases.first_start_ns) as span_ns,
    sum(phases.busy_ns) as load_ns,
    min(phases.first_start_ns) as first_start_ns,
    any_value(phases.pp_stage) as pp_stage,
    any_value(phases.tp_rank) as tp_rank,
    any_value(phases.dp_rank) as dp_rank,
    any_value(phases.pp_group_index) as pp_group_index
from fct_microbatch_phases as phases
where phases.run_id = ? and phases.iteration = ? and phases.timing_source = 'cpu'
    and phases.microbatch is not null
group by phases.rank
order by phases.rank
"""


class TimelineFamily:
    """Kernel kinds per rank over one iteration, shaded by microbatch."""

    name = "timeline"
    title = "Rank timeline"
    marts = ("fct_kernels", "fct_rank_iterations", "fct_microbatch_phases")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One timeline chart: GPU kernel lanes, or CPU step frames for CPU-only runs."""
        apply_theme()
        chosen = ctx.df(_ITERATION_SQL, [ctx.run_id])
        if not chosen.empty:
            return [self._render_gpu(ctx, int(chosen.iloc[0]["iteration"]))]
        cpu = ctx.df(_CPU_ITERATION_SQL, [ctx.run_id])
        if not cpu.empty:
            return [self._render_cpu(ctx, int(cpu.iloc[0]["iteration"]))]
        return []

    def _render_gpu(self, ctx: ChartContext, iteration: int) -> RenderedChart:
        """Kind lanes from merged fct_kernels intervals, microbatch bands behind."""
        ranks = ctx.df(_RANKS_SQL, [ctx.run_id, iteration])
        drawn, how = pick_ranks(ranks)
        rank_list = [int(rank) for rank in drawn["rank"]]
        t0 = int(drawn["first_start_ns"].min())
        span = int((drawn["first_start_ns"] + drawn["span_ns"]).max()) - t0
        tolerance = max(span // MERGE_RESOLUTION, 0)
        merged = merged_intervals(ctx, iteration, rank_list, tolerance)
        bands = ctx.df(_BANDS_SQL.format(chunks=chunk_columns(ctx, "fct_microbatch_phases",
                                                              "phases")),
                       [ctx.run_id, iteration, "gpu", rank_list, list(BLOCK_PHASES)])
        fig, ax = _draw(drawn, merged, bands, t0, span, lanes=True)
        title = f"Rank timeline · iteration {iteration} · kernels by kind"
        ax.set_title(title + f" · {len(drawn)} of {len(ranks)} ranks", loc="left")
        caption = (f"Iteration {iteration}, wall-clock ms since the earliest drawn rank's first "
                   "kernel (ranks' clocks as recorded). Each rank has three lanes: compute, "
                   "communication, memory; bars are merged busy intervals (gaps under "
                   f"{tolerance / 1e3:.1f} µs closed). Faint bands behind mark forward (F) and "
                   "backward (B) microbatches (F3.1 = microbatch 3 of model chunk 1 when "
                   f"interleaved). {how}")
        return save_figure(fig, ctx, "timeline_kernels", title, caption)

    def _render_cpu(self, ctx: ChartContext, iteration: int) -> RenderedChart:
        """CPU-only capture: the forward/backward step frames per rank."""
        ranks = ctx.df(_CPU_RANKS_SQL, [ctx.run_id, iteration])
        drawn, how = pick_ranks(ranks)
        rank_list = [int(rank) for rank in drawn["rank"]]
        t0 = int(drawn["first_start_ns"].min())
        span = int((drawn["first_start_ns"] + drawn["span_ns"]).max()) - t0
        bands = ctx.df(_BANDS_SQL.format(chunks=chunk_columns(ctx, "fct_microbatch_phases",
                                                              "phases")),
                       [ctx.run_id, iteration, "cpu", rank_list, list(BLOCK_PHASES)])
        empty = pd.DataFrame(columns=["rank", "kind", "start_ns", "end_ns"])
        fig, ax = _draw(drawn, empty, bands, t0, span, lanes=False)
        title = f"Rank timeline · iteration {iteration} · CPU step frames"
        ax.set_title(title + f" · {len(drawn)} of {len(ranks)} ranks", loc="left")
        caption = (f"Iteration {iteration}. These traces hold no GPU kernels, so each rank's "
                   "row shows its forward (F) and backward (B) step frames on the CPU "
                   "(fct_microbatch_phases, timing_source cpu), wall-clock ms since the "
                   f"earliest drawn rank's first step. {how}")
        return save_figure(fig, ctx, "timeline_cpu_steps", title, caption)


def merged_intervals(ctx: ChartContext, iteration: int, ranks: list[int],
                     tolerance_ns: int = 0) -> pd.DataFrame:
    """Busy islands (rank, kind, start_ns, end_ns) of ``ranks``' kernels in ``iteration``.

    Kernels of one rank and kind that overlap, touch, or leave a gap of at
    most ``tolerance_ns`` become one island. With ``tolerance_ns = 0`` the
    islands' summed length is the union length fct_rank_iterations reports
    (compute_ns, communication_ns, memory_ns); a tolerance only closes gaps
    too small to see.
    """
    return ctx.df(_MERGED_SQL, [ctx.run_id, iteration, ranks, tolerance_ns])


def pick_ranks(ranks: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """All ranks when they fit on one axis, else representatives; plus a caption sentence.

    Representatives: per pipeline stage, the slowest, median and fastest rank
    by load (one per stage, the slowest, when stages x 3 would not fit; load
    quantiles of the whole run when stages are unknown or too many). Load is
    the rank's compute time in the iteration (busy CPU step time for CPU-only
    captures), not its span: synchronous training stretches every rank's
    span to the slowest one's, while a straggler's compute stands out. Each
    drawn rank gets a ``role`` naming why it is drawn.
    """
    ranks = ranks.copy()
    ranks["role"] = ""
    if len(ranks) <= MAX_ROWS:
        return ranks.sort_values(["rank"]), f"All {len(ranks)} ranks drawn."
    stages = ranks["pp_stage"].dropna().unique()
    picked: list[pd.DataFrame] = []
    if 0 < len(stages) and len(stages) * 3 <= MAX_ROWS:
        for stage in sorted(stages):
            picked.append(_representatives(ranks[ranks["pp_stage"] == stage],
                                           f"of stage {int(stage)}"))
        how = ("slowest, median and fastest rank (by compute time) of each of the "
               f"{len(stages)} pipeline stages")
    elif 0 < len(stages) <= MAX_ROWS:
        for stage in sorted(stages):
            stage_ranks = ranks[ranks["pp_stage"] == stage].sort_values(
                ["load_ns", "rank"], ascending=[False, True])
            picked.append(stage_ranks.head(1).assign(role=f"slowest of stage {int(stage)}"))
        how = f"slowest rank (by compute time) of each of the {len(stages)} stages"
    else:
        ordered = ranks.sort_values(["load_ns", "rank"], ascending=[False, True])
        positions = sorted({round(i * (len(ordered) - 1) / (MAX_ROWS - 1))
                            for i in range(MAX_ROWS)})
        chosen = ordered.iloc[positions].copy()
        chosen["role"] = [f"load rank {pos + 1}/{len(ordered)}" for pos in positions]
        picked.append(chosen)
        how = f"{len(chosen)} ranks evenly spaced by compute time, slowest first"
    drawn = pd.concat(picked).drop_duplicates("rank")
    return drawn, f"{len(ranks)} ranks: drawn the {how}; the others are left out."


def _representatives(stage_ranks: pd.DataFrame, where: str) -> pd.DataFrame:
    """Slowest, median and fastest rank of ``stage_ranks`` by load, labelled."""
    ordered = stage_ranks.sort_values(["load_ns", "rank"], ascending=[False, True])
    rows = []
    for role, position in (("slowest", 0), ("median", (len(ordered) - 1) // 2),
                           ("fastest", len(ordered) - 1)):
        row = ordered.iloc[[position]].copy()
        row["role"] = f"{role} {where}"
        rows.append(row)
    return pd.concat(rows).drop_duplicates("rank")


def _row_label(row: pd.Series) -> str:
    """``rank 5 · pp1 tp1 dp0`` (coordinates known) plus why it is drawn."""
    parts = [f"rank {int(row['rank'])}"]
    coords = [f"{name}{int(row[column])}" for name, column in
              (("pp", "pp_stage"), ("tp", "tp_rank"), ("dp", "dp_rank"))
              if column in row and pd.notna(row[column])]
    if coords:
        parts.append(" ".join(coords))
    label = " · ".join(parts)
    return f"{label}\n{row['role']}" if row.get("role") else label


def _draw(drawn: pd.DataFrame, merged: pd.DataFrame, bands: pd.DataFrame, t0: int, span: int,
          lanes: bool) -> tuple[plt.Figure, plt.Axes]:
    """Draw the rows: microbatch bands, then (with ``lanes``) one lane per kind."""
    rows = len(drawn)
    # Rows shrink a little past 24 so 64 representatives stay one screenful-ish.
    row_height = ROW_HEIGHT_IN if rows <= 24 else ROW_HEIGHT_IN * 0.75
    height = max(2.4, row_height * rows + 1.5)
    fig, ax = plt.subplots(figsize=(FIG_WIDTH_IN, height))
    fig.subplots_adjust(left=0.15, right=0.98, top=1 - 0.5 / height, bottom=0.85 / height)
    width_in = FIG_WIDTH_IN * ax.get_position().width
    inch_per_ms = width_in / max(span / NS_PER_MS, 1e-9)
    position = {int(rank): index for index, rank in enumerate(drawn["rank"])}
    band_alpha = 0.28 if lanes else 0.9
    chunks = int(bands["vpp_chunk"].max()) + 1 if bands["vpp_chunk"].notna().any() else 1
    chunk_of = bands["vpp_chunk"].fillna(0).astype(int)
    # Later virtual-pipeline chunks darker, exactly as on the pipeline Gantt.
    for (rank, phase, chunk), group in bands.groupby([bands["rank"], bands["phase"], chunk_of]):
        spans = [((start - t0) / NS_PER_MS, (end - start) / NS_PER_MS)
                 for start, end in zip(group["start_ns"], group["end_ns"], strict=True)]
        ax.broken_barh(spans, (position[int(rank)] - 0.46, 0.92),
                       facecolors=shade(phase_color(phase), int(chunk), chunks),
                       alpha=band_alpha, edgecolor="white", linewidth=0.4, zorder=1)
    char_in = BAND_LABEL_PT * 0.62 / 72
    for band, chunk in zip(bands.itertuples(index=False), chunk_of, strict=True):
        text = str(band.phase)[0].upper() + block_label(band.chunk_microbatch, band.vpp_chunk,
                                                        chunks)
        width_ms = (band.end_ns - band.start_ns) / NS_PER_MS
        if width_ms * inch_per_ms < char_in * (len(text) + 0.6):
            continue
        y = position[int(band.rank)] + (-0.33 if lanes else 0)
        color = ("#333333" if lanes
                 else text_color(shade(phase_color(band.phase), int(chunk), chunks)))
        ax.text((band.start_ns - t0) / NS_PER_MS + width_ms / 2, y, text, ha="center",
                va="center", fontsize=BAND_LABEL_PT, color=color, zorder=3, clip_on=True)
    if lanes:
        lane_height = 0.2
        offsets = {kind: -0.13 + index * (lane_height + 0.04) for index, kind in enumerate(LANES)}
        for (rank, kind), group in merged.groupby(["rank", "kind"]):
            spans = [((start - t0) / NS_PER_MS, (end - start) / NS_PER_MS)
                     for start, end in zip(group["start_ns"], group["end_ns"], strict=True)]
            ax.broken_barh(spans, (position[int(rank)] + offsets.get(kind, 0) - lane_height / 2,
                                   lane_height),
                           facecolors=kind_color(kind), edgecolor="none", zorder=2)
    ax.set_yticks(range(rows), [_row_label(row) for _, row in drawn.iterrows()])
    ax.tick_params(axis="y", labelsize=7 if rows <= 24 else 6)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, span / NS_PER_MS * 1.005)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("ms since the iteration's first drawn event")
    for index in range(1, rows):
        ax.axhline(index - 0.5, color="#e0e0e0", linewidth=0.6, zorder=0)
    present_phases = [phase for phase in BLOCK_PHASES if phase in set(bands["phase"])]
    handles = []
    if lanes:
        handles += [Patch(facecolor=kind_color(kind), label=kind) for kind in LANES]
    handles += [Patch(facecolor=shade(phase_color(phase), chunk, chunks), alpha=band_alpha,
                      label=f"{phase}" + (f" chunk {chunk}" if chunks > 1 else " microbatch")
                      + (" (band)" if lanes else ""))
                for phase in present_phases for chunk in range(chunks)]
    if handles:
        axes_height_in = height * ax.get_position().height
        ax.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
                  bbox_to_anchor=(0.5, -0.42 / axes_height_in))
    return fig, ax


FAMILY = TimelineFamily()
