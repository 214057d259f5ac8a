"""One palette and one theme for every chart of the report.

Why a shared module: a reader who learns "blue is compute, orange is
communication" on the first chart must be able to trust it on the last. Kinds
(fct_kernels.kind) and phases (fct_kernels.phase / fct_microbatch_phases.phase)
each get a fixed colour here; families import these maps instead of letting
seaborn pick colours per chart. Colours are from the colour-blind-safe
Okabe-Ito / Tableau families and differ in lightness too, so they survive
greyscale printing.
"""

from __future__ import annotations

import matplotlib as mpl
import seaborn as sns

#: Kernel kinds (fct_kernels.kind) plus the derived parts of a breakdown.
KIND_COLORS: dict[str, str] = {
    "compute": "#1f77b4",          # blue
    "communication": "#ff7f0e",    # orange
    "memory": "#2ca02c",           # green
    "overlap": "#9467bd",          # purple: compute under communication
    "exposed_communication": "#d62728",  # red: communication nothing hides
    "idle": "#d9d9d9",             # light grey: nothing running
}

#: Megatron phases (fct_kernels.phase, fct_microbatch_phases.phase,
#: fct_pp_timer_events.phase).
PHASE_COLORS: dict[str, str] = {
    "forward": "#4c9be8",     # light blue
    "backward": "#e8743b",    # burnt orange
    "recompute": "#a05fc8",   # violet
    "pp_p2p": "#f2c12e",      # yellow
    "dp_sync": "#d64550",     # red
    "optimizer": "#3aa676",   # green
    "other": "#9e9e9e",       # grey
}

#: Colour of idle gaps / bubbles everywhere (same as KIND_COLORS["idle"]).
IDLE_COLOR: str = KIND_COLORS["idle"]

#: Fallback for a kind or phase the palette does not know yet.
UNKNOWN_COLOR: str = "#7f7f7f"


def kind_color(kind: str | None) -> str:
    """Colour of a kernel kind; grey for one the palette does not name."""
    return KIND_COLORS.get(kind or "", UNKNOWN_COLOR)


def phase_color(phase: str | None) -> str:
    """Colour of a Megatron phase; grey for one the palette does not name."""
    return PHASE_COLORS.get(phase or "", UNKNOWN_COLOR)


def apply_theme() -> None:
    """Set the report's seaborn/matplotlib theme (idempotent; call before drawing).

    White grid, compact fonts so long rank labels fit, no top/right spines,
    and SVG text kept as text (smaller files, searchable in the browser).
    """
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.0)
    mpl.rcParams.update({
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "axes.labelsize": 9,
        "xtick.labelsize": 8,
        "ytick.labelsize": 8,
        "legend.fontsize": 8,
        "legend.frameon": False,
        "figure.titlesize": 12,
        "figure.titleweight": "bold",
        "svg.fonttype": "none",
        "savefig.facecolor": "white",
    })
