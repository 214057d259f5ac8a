"""Expected communication of a layout: rank x rank traffic and bytes per group kind.

Why: a comm log (``tracehouse commtrace`` or Genstack's) says what one
training step must move before any GPU runs it; the network question is
where those bytes go. The heatmap is ``fct_comm_traffic_matrix`` under the
ring plan (ring all-reduce, all-gather, reduce-scatter and broadcast, all-to-all,
P2P; the tree all-reduce variant is left out so every byte counts once):
blocks on the diagonal are tensor-parallel rings inside a node, off-diagonal
bands are data-parallel and pipeline traffic. Beyond 128 ranks, ranks are
binned into equal blocks (bytes summed). The bars are ``fct_comm_group_bytes``:
bytes per group kind, split by collective family. Runs without comm logs
draw nothing.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tracehouse.reports.base import ChartContext, RenderedChart, save_figure
from tracehouse.reports.comm_groups import group_color
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import apply_theme

#: Largest matrix drawn rank by rank; larger worlds are binned.
MAX_MATRIX_RANKS = 128

_MATRIX_SQL = """
    select src_rank, dst_rank, sum(bytes) as bytes
    from fct_comm_traffic_matrix
    where run_id = ? and algorithm <> 'tree_all_reduce'
    group by src_rank, dst_rank
"""

_GROUP_SQL = """
    select group_kind, collective, bytes
    from fct_comm_group_bytes
    where run_id = ? and bytes > 0
"""

_COLLECTIVE_COLORS = {
    "all_reduce": "#4e79a7", "all_gather": "#59a14f", "reduce_scatter": "#e15759",
    "broadcast": "#f28e2b", "all_to_all": "#b07aa1", "p2p": "#edc948",
}


def _unit(total: float) -> tuple[float, str]:
    for scale, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if total >= scale:
            return float(scale), name
    return 1.0, "B"


class CommTrafficFamily:
    """Traffic matrix and bytes per group kind of a run's comm logs (module docstring)."""

    name = "comm_traffic"
    title = "Expected communication (comm logs)"
    marts: tuple[str, ...] = ("fct_comm_traffic_matrix", "fct_comm_group_bytes")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """The two charts, or [] when the run has no comm logs."""
        if not (ctx.has_table("fct_comm_traffic_matrix") and ctx.has_table("fct_comm_group_bytes")):
            return []
        matrix = ctx.df(_MATRIX_SQL, [ctx.run_id])
        groups = ctx.df(_GROUP_SQL, [ctx.run_id])
        if matrix.empty and groups.empty:
            return []
        apply_theme()
        charts = []
        if not matrix.empty:
            charts.append(self._matrix(ctx, matrix))
        if not groups.empty:
            charts.append(self._groups(ctx, groups))
        return charts

    def _matrix(self, ctx: ChartContext, frame: pd.DataFrame) -> RenderedChart:
        world = int(max(frame["src_rank"].max(), frame["dst_rank"].max())) + 1
        block = 1 if world <= MAX_MATRIX_RANKS else math.ceil(world / MAX_MATRIX_RANKS)
        cells = math.ceil(world / block)
        grid = np.zeros((cells, cells))
        np.add.at(grid, ((frame["src_rank"] // block).to_numpy(dtype=int),
                         (frame["dst_rank"] // block).to_numpy(dtype=int)),
                  frame["bytes"].to_numpy(dtype=float))
        scale, unit = _unit(float(grid.max()))
        fig, ax = plt.subplots(figsize=(7.5, 6.5))
        shown = np.where(grid > 0, grid / scale, np.nan)
        image = ax.imshow(shown, cmap="viridis", interpolation="nearest")
        fig.colorbar(image, ax=ax, label=f"{unit} per step")
        what = "rank" if block == 1 else f"block of {block} ranks"
        ax.set_xlabel(f"receiving {what}")
        ax.set_ylabel(f"sending {what}")
        ax.set_title(f"Traffic matrix (ring plan) — {plain_text(ctx.run_id)}")
        fig.tight_layout()
        total = float(grid.sum())
        caption = (f"Bytes each rank sends each other rank in one step, from every rank's comm "
                   f"log (fct_comm_traffic_matrix, ring all-reduce/all-gather/reduce-scatter/"
                   f"broadcast, all-to-all and P2P; tree all-reduce left out). {world:,} ranks"
                   + ("" if block == 1 else f", binned {block} to a cell")
                   + f"; {total / 2**30:,.2f} GiB in all.")
        return save_figure(fig, ctx, "comm-traffic-matrix", "Traffic matrix (ring plan)",
                           caption)

    def _groups(self, ctx: ChartContext, frame: pd.DataFrame) -> RenderedChart:
        table = frame.pivot_table(index="group_kind", columns="collective", values="bytes",
                                  aggfunc="sum", fill_value=0.0)
        table = table.loc[table.sum(axis=1).sort_values(ascending=False).index]
        scale, unit = _unit(float(table.sum(axis=1).max()))
        fig, ax = plt.subplots(figsize=(10.5, max(2.4, 0.42 * len(table) + 1.4)))
        left = pd.Series(0.0, index=table.index)
        for collective in table.columns:
            values = table[collective].astype(float) / scale
            ax.barh(list(range(len(table))), values, left=left,
                    color=_COLLECTIVE_COLORS.get(collective, group_color(collective)),
                    label=plain_text(collective))
            left = left + values
        ax.set_yticks(list(range(len(table))))
        ax.set_yticklabels([plain_text(kind) for kind in table.index])
        ax.invert_yaxis()
        ax.set_xlabel(f"{unit} per step (each collective instance once)")
        ax.set_ylabel("group kind")
        ax.legend(title="collective", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title(f"Bytes per group kind — {plain_text(ctx.run_id)}")
        fig.tight_layout()
        caption = ("fct_comm_group_bytes: the full buffer of every expected collective "
                   "instance (nccl-tests' size), summed per group kind and collective family.")
        return save_figure(fig, ctx, "comm-traffic-group-bytes", "Bytes per group kind",
                           caption)


FAMILY = CommTrafficFamily()
