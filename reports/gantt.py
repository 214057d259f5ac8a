"""Shared pieces of the time-axis charts: Gantt rows, block labels, mart probes.

Why a module of its own: the pipeline Gantt, the model-replica chart and the
PP-timer chart draw the same thing (forward/backward blocks on rows, idle
gaps shaded, blocks labelled by microbatch and chunk) and must look the same,
so they share one drawing function. It draws one ``broken_barh`` per row x
phase x chunk, never one artist per block, so thousands of microbatches cost
a handful of artists. Not a chart family (the registry does not list it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.colors as mcolors
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from tracehouse.reports.base import ChartContext
from tracehouse.reports.style import IDLE_COLOR, phase_color

#: Phases drawn as blocks on a Gantt row (the per-microbatch work).
BLOCK_PHASES: tuple[str, ...] = ("forward", "backward", "recompute")

#: Label font size inside blocks, points.
LABEL_FONT_PT = 6.0

NS_PER_MS = 1e6


def has_column(ctx: ChartContext, table: str, column: str) -> bool:
    """True when ``table`` exists and has ``column``.

    Why: marts gain columns between releases (``vpp_chunk`` and
    ``chunk_microbatch`` on fct_microbatch_phases); a chart uses them when
    present and still renders on an older warehouse.
    """
    row = ctx.con.execute(
        "select count(*) from information_schema.columns where table_name = ? and column_name = ?",
        [table, column],
    ).fetchone()
    return bool(row and row[0])


def chunk_columns(ctx: ChartContext, table: str, alias: str) -> str:
    """SQL select-list for ``vpp_chunk`` and ``chunk_microbatch`` of ``alias``.

    Falls back to NULL chunk and the flat microbatch when the mart predates
    those columns. Only fixed identifiers go into the SQL (never trace data).
    """
    chunk = (f"{alias}.vpp_chunk" if has_column(ctx, table, "vpp_chunk")
             else "null::bigint")
    chunk_mb = (f"coalesce({alias}.chunk_microbatch, {alias}.microbatch)"
                if has_column(ctx, table, "chunk_microbatch") else f"{alias}.microbatch")
    return f"{chunk} as vpp_chunk, {chunk_mb} as chunk_microbatch"


def shade(color: str, chunk: int | None, chunks: int) -> tuple[float, float, float]:
    """The phase colour, darkened for later virtual-pipeline chunks.

    Chunk 0 keeps the palette colour; the last chunk is mixed 45% with black,
    so forward stays recognisably forward while chunks stay apart.
    """
    red, green, blue = mcolors.to_rgb(color)
    if not chunk or chunks <= 1:
        return red, green, blue
    factor = 1.0 - 0.45 * min(chunk, chunks - 1) / (chunks - 1)
    return red * factor, green * factor, blue * factor


def text_color(rgb: tuple[float, float, float]) -> str:
    """Black or white, whichever reads better on ``rgb``."""
    red, green, blue = rgb
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.55 else "white"


@dataclass(frozen=True)
class GanttRow:
    """One row of a Gantt: ``key`` matches ``blocks.row_key``; span in ns."""

    key: object
    label: str
    start_ns: int
    end_ns: int
    note: str = ""


def block_label(microbatch: object, chunk: object, chunks: int) -> str:
    """``"5"`` or, with virtual pipelining, ``"5.1"`` (microbatch.chunk)."""
    if microbatch is None or pd.isna(microbatch):
        return ""
    if chunks > 1 and chunk is not None and not pd.isna(chunk):
        return f"{int(microbatch)}.{int(chunk)}"
    return str(int(microbatch))


def draw_gantt(ax: Axes, rows: Sequence[GanttRow], blocks: pd.DataFrame, t0_ns: int,
               axes_width_in: float, chunks: int = 1, label_blocks: bool = True) -> None:
    """Draw ``rows`` top to bottom on ``ax``: idle background, phase blocks, labels.

    ``blocks`` has columns row_key, phase, vpp_chunk, chunk_microbatch,
    start_ns, end_ns. Each row's span (``GanttRow.start_ns`` .. ``end_ns``)
    is painted idle grey first; blocks cover it, so what stays grey is idle.
    A label is written only where it fits inside its block at
    ``axes_width_in`` inches of axis width (no overlapping text at any scale).
    """
    height = 0.8
    positions = {row.key: index for index, row in enumerate(rows)}
    for index, row in enumerate(rows):
        span = ((row.start_ns - t0_ns) / NS_PER_MS, (row.end_ns - row.start_ns) / NS_PER_MS)
        ax.broken_barh([span], (index - height / 2, height), facecolors=IDLE_COLOR,
                       edgecolor="none", hatch="////", linewidth=0, zorder=1)
    if not blocks.empty:
        blocks = blocks[blocks["row_key"].isin(positions)]
        chunk_values = blocks["vpp_chunk"].fillna(0).astype(int)
        for (key, phase, chunk), group in blocks.groupby(
                [blocks["row_key"], blocks["phase"], chunk_values], sort=False):
            color = shade(phase_color(phase), int(chunk), chunks)
            spans = [((start - t0_ns) / NS_PER_MS, (end - start) / NS_PER_MS)
                     for start, end in zip(group["start_ns"], group["end_ns"], strict=True)]
            ax.broken_barh(spans, (positions[key] - height / 2, height), facecolors=color,
                           edgecolor="white", linewidth=0.3, zorder=2)
    xmin = min((row.start_ns for row in rows), default=t0_ns)
    xmax = max((row.end_ns for row in rows), default=t0_ns + 1)
    span_ms = max((xmax - t0_ns) / NS_PER_MS, 1e-9)
    if label_blocks and not blocks.empty:
        inch_per_ms = axes_width_in / span_ms
        char_in = LABEL_FONT_PT * 0.62 / 72
        for block in blocks.itertuples(index=False):
            text = block_label(block.chunk_microbatch, block.vpp_chunk, chunks)
            width_ms = (block.end_ns - block.start_ns) / NS_PER_MS
            if not text or width_ms * inch_per_ms < char_in * (len(text) + 0.8):
                continue
            color = shade(phase_color(block.phase),
                          0 if pd.isna(block.vpp_chunk) else int(block.vpp_chunk), chunks)
            ax.text((block.start_ns - t0_ns) / NS_PER_MS + width_ms / 2, positions[block.row_key],
                    text, ha="center", va="center", fontsize=LABEL_FONT_PT,
                    color=text_color(color), zorder=3, clip_on=True)
    ax.set_yticks(range(len(rows)), [row.label for row in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim((xmin - t0_ns) / NS_PER_MS, span_ms * 1.005)
    ax.grid(axis="y", visible=False)
    notes = [row.note for row in rows]
    if any(notes):
        twin = ax.twinx()
        twin.set_ylim(ax.get_ylim())
        twin.set_yticks(range(len(rows)), notes)
        twin.tick_params(axis="y", length=0, labelsize=7)
        twin.grid(False)
        for side in ("top", "right", "left", "bottom"):
            twin.spines[side].set_visible(False)


def legend_handles(phases: Sequence[str], chunks: int) -> list[Patch]:
    """Legend patches: each phase (per chunk when chunks > 1) and idle."""
    handles: list[Patch] = []
    for phase in phases:
        for chunk in range(max(chunks, 1)):
            label = phase if chunks <= 1 else f"{phase} chunk {chunk}"
            handles.append(Patch(facecolor=shade(phase_color(phase), chunk, chunks), label=label))
    handles.append(Patch(facecolor=IDLE_COLOR, hatch="////", edgecolor="#b0b0b0", label="idle"))
    return handles


def theoretical_bubble(pp_size: int, steps_per_stage: int) -> float | None:
    """(p − 1) / (v·m + p − 1), with ``steps_per_stage`` = v·m forward steps of a stage.

    Why v·m from a count: a stage runs one forward per microbatch per model
    chunk, so counting its forward blocks gives v·m even where the mart does
    not say v (the microbatch index then runs over all chunks).
    """
    if pp_size < 1 or steps_per_stage < 1:
        return None
    return (pp_size - 1) / (steps_per_stage + pp_size - 1)
