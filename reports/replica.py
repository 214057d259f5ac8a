"""Model replica: every PP group of one replica on one shared time axis.

What it shows: a model replica (the tp x cp x pp ranks that share a
data-parallel coordinate, dim_ranks.model_replica) is several pipelines
running side by side, one per tensor/context-parallel slice. Drawing all of
them on one wall-clock axis (rows grouped by PP group, stages top to bottom)
shows whether the pipelines stay in step or one of them lags: the
Megatron-TraceViz "Model_Group_X_all_pp_groups_concatenated" figure, without
stitching images together, so every group shares the same time scale.

Sources as in :mod:`tracehouse.reports.pipeline`: GPU kernels when the run has
them, else CPU forward/backward step frames. Many replicas: the first and the
slowest are drawn. A replica with more than ``MAX_ROWS_PER_AXIS`` ranks shows
its first PP groups only; the caption says how many.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import MAX_ROWS_PER_AXIS, ChartContext, RenderedChart, save_figure
from tracehouse.reports.gantt import BLOCK_PHASES, GanttRow, chunk_columns, draw_gantt
from tracehouse.reports.pipeline import known_chunks, legend_below, schedule_name
from tracehouse.reports.style import apply_theme

#: Figure width, inches (as the pipeline Gantt).
FIG_WIDTH_IN = 13.0
#: Height of one rank row, inches.
ROW_HEIGHT_IN = 0.3
#: Replicas drawn per run at most (the first and the slowest).
MAX_REPLICAS = 2

_SOURCE_SQL = """
select
    phases.timing_source,
    max(phases.iteration) as last_iteration
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.microbatch is not null
    and phases.model_replica is not null
    and phases.pp_group_index is not null
    and phases.pp_size > 1
group by phases.timing_source
"""

_REPLICAS_SQL = """
select
    phases.model_replica,
    count(distinct phases.pp_group_index) as pp_groups,
    count(distinct phases.rank) as ranks,
    max(phases.last_end_ns) - min(phases.first_start_ns) as span_ns
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.timing_source = ?
    and phases.iteration = ?
    and phases.microbatch is not null
    and phases.model_replica is not null
    and phases.pp_group_index is not null
group by phases.model_replica
order by phases.model_replica
"""

_PHASES_SQL = """
select
    phases.pp_group_index,
    phases.pp_stage,
    phases.pp_size,
    phases.tp_rank,
    phases.cp_rank,
    phases.rank,
    phases.phase,
    phases.microbatch,
    {chunks},
    phases.first_start_ns as start_ns,
    phases.last_end_ns as end_ns
from fct_microbatch_phases as phases
where phases.run_id = ?
    and phases.timing_source = ?
    and phases.iteration = ?
    and phases.model_replica = ?
    and phases.microbatch is not null
    and list_contains(?, phases.phase)
    and phases.first_start_ns is not null
"""


#: v of the iteration drawn, as the pipeline chart reads it (fct_pipeline_bubbles).
_VPP_SQL = """
select max(vpp_size) as vpp_size
from fct_pipeline_bubbles
where run_id = ? and timing_source = ? and iteration = ?
"""


class ReplicaFamily:
    """Every PP group of a model replica on one time axis."""

    name = "replica"
    title = "Model replica"
    marts = ("fct_microbatch_phases", "fct_pipeline_bubbles")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One chart per chosen replica; [] for runs without pipeline topology."""
        apply_theme()
        sources = ctx.df(_SOURCE_SQL, [ctx.run_id])
        if sources.empty:
            return []
        source_row = sources.sort_values("timing_source", key=lambda s: s != "gpu").iloc[0]
        source = str(source_row["timing_source"])
        iteration = int(source_row["last_iteration"])
        replicas = ctx.df(_REPLICAS_SQL, [ctx.run_id, source, iteration])
        if replicas.empty:
            return []
        chosen, how = pick_replicas(replicas)
        chunk_sql = chunk_columns(ctx, "fct_microbatch_phases", "phases")
        # The schedule (v) as the pipeline chart of the same run names it.
        vpp = (ctx.df(_VPP_SQL, [ctx.run_id, source, iteration])
               if ctx.has_table("fct_pipeline_bubbles") else None)
        charts = []
        for replica in chosen:
            data = ctx.df(_PHASES_SQL.format(chunks=chunk_sql),
                          [ctx.run_id, source, iteration, replica, list(BLOCK_PHASES)])
            if data.empty:
                continue
            fig, title, cut = draw_replica(data, replica, iteration, vpp)
            what = ("GPU kernels (a block spans the microbatch's first to last kernel)"
                    if source == "gpu" else
                    "CPU forward/backward step frames (these traces hold no GPU kernels)")
            caption = (f"Source: {what}; iteration {iteration}. Rows are grouped by PP group "
                       "(one pipeline per tensor/context-parallel slice), stages top to bottom; "
                       f"all groups share one wall-clock axis. {how}{cut}")
            charts.append(save_figure(fig, ctx, f"replica_{replica}", title, caption))
        return charts


def pick_replicas(replicas: pd.DataFrame) -> tuple[list[int], str]:
    """All replicas up to :data:`MAX_REPLICAS`, else the first and the longest-running."""
    indexes = [int(value) for value in replicas["model_replica"]]
    if len(indexes) <= MAX_REPLICAS:
        return indexes, f"All {len(indexes)} model replica(s) drawn."
    slowest = int(replicas.sort_values(["span_ns", "model_replica"],
                                       ascending=[False, True]).iloc[0]["model_replica"])
    chosen = [indexes[0]] + ([slowest] if slowest != indexes[0] else [])
    return chosen, (f"{len(indexes)} model replicas: drawn the first (replica {indexes[0]})"
                    + (f" and the one with the longest span (replica {slowest})"
                       if slowest != indexes[0] else ", which also has the longest span")
                    + "; the others are left out.")


def draw_replica(data: pd.DataFrame, replica: int, iteration: int,
                 vpp: pd.DataFrame | None = None) -> tuple[plt.Figure, str, str]:
    """Draw one replica's PP groups; returns (figure, title, caption note on cut rows).

    ``vpp`` (a ``vpp_size`` column from fct_pipeline_bubbles) says v when the
    phases do not, so this chart and the pipeline chart name one schedule.
    """
    groups = sorted(int(group) for group in data["pp_group_index"].unique())
    pp_size = int(data["pp_size"].max()) if data["pp_size"].notna().any() else 1
    keep = max(1, MAX_ROWS_PER_AXIS // max(pp_size, 1))
    cut = ""
    if len(groups) > keep:
        cut = (f" This replica has {len(groups)} PP groups; the first {keep} are drawn "
               f"({MAX_ROWS_PER_AXIS} rows at most).")
        groups = groups[:keep]
        data = data[data["pp_group_index"].isin(groups)]
    t0 = int(data["start_ns"].min())
    t1 = int(data["end_ns"].max())
    ranks = (data.groupby(["pp_group_index", "pp_stage", "rank"], dropna=False)
             .size().reset_index().sort_values(["pp_group_index", "pp_stage", "rank"]))
    rows = [GanttRow(key=int(row.rank),
                     label=f"group {int(row.pp_group_index)} · stage {int(row.pp_stage)} · "
                           f"rank {int(row.rank)}",
                     start_ns=t0, end_ns=t1)
            for row in ranks.itertuples(index=False)]
    chunks_known = known_chunks(data, vpp)
    chunks = chunks_known or 1
    height = max(2.4, ROW_HEIGHT_IN * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(FIG_WIDTH_IN, height))
    fig.subplots_adjust(left=0.16, right=0.97, top=1 - 0.75 / height, bottom=0.85 / height)
    width_in = FIG_WIDTH_IN * ax.get_position().width
    blocks = data.rename(columns={"rank": "row_key"})
    draw_gantt(ax, rows, blocks, t0, width_in, chunks=chunks, label_blocks=len(rows) <= 32)
    # A rule between PP groups, so each pipeline reads as a band.
    boundaries = ranks["pp_group_index"].to_numpy()
    for index in range(1, len(rows)):
        if boundaries[index] != boundaries[index - 1]:
            ax.axhline(index - 0.5, color="#444444", linewidth=0.8, zorder=4)
    ax.set_xlabel("ms since the replica's first microbatch (one axis for all groups)")
    title = (f"Model replica {replica} · iteration {iteration} · {len(groups)} PP group(s) × "
             f"{pp_size} stages · {schedule_name(chunks_known)}")
    ax.set_title(title, loc="left")
    present = [phase for phase in BLOCK_PHASES if phase in set(data["phase"])]
    legend_below(ax, present, chunks)
    return fig, title, cut


FAMILY = ReplicaFamily()
