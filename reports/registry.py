"""The report's chart families, in the order a reader meets them.

Why a list of module names: adding a chart family is one module exposing
``FAMILY`` (see :class:`tracehouse.reports.base.ChartFamily`) plus one line
here. Order is reading order in ``index.html``: where the time goes first,
then pipelines, then the per-rank and per-kernel detail, then comparisons.
"""

from __future__ import annotations

import importlib

from tracehouse.reports.base import ChartFamily

FAMILY_MODULES: tuple[str, ...] = (
    "tracehouse.reports.heatmaps",      # rank x iteration: step, compute, exposed comm, idle
    "tracehouse.reports.microbatch",    # compute / comm / overlap per microbatch and phase
    "tracehouse.reports.pipeline",      # pipeline-group Gantt (GPU, CPU steps, PP timer)
    "tracehouse.reports.bubbles",       # what fills the pipeline bubble (issue 11)
    "tracehouse.reports.replica",       # every PP group of a model replica on one axis
    "tracehouse.reports.timeline",      # kernel categories per rank over wall-clock time
    "tracehouse.reports.idle",          # idle time by cause per rank, as HTA (issue 11)
    "tracehouse.reports.comm_groups",   # communication time by group kind
    "tracehouse.reports.comm_traffic",  # expected traffic matrix and bytes (comm logs)
    "tracehouse.reports.stragglers",    # who holds the job back: stragglers, skew, clocks
    "tracehouse.reports.kernels",       # top kernels
    "tracehouse.reports.roofline",      # kernels' FLOP/s against the GPU's roofs (issue 32)
    "tracehouse.reports.efficiency",    # achieved TFLOP/s per phase and pipeline stage (issue 32)
    "tracehouse.reports.mfu",           # MFU per iteration against the run's (issue 32)
    "tracehouse.reports.whatif",        # what would help most: what-if savings (issue 33)
    "tracehouse.reports.compare",       # two runs side by side (only with a second run)
)


def families() -> list[ChartFamily]:
    """Import every registered family module and return their ``FAMILY`` objects."""
    return [importlib.import_module(name).FAMILY for name in FAMILY_MODULES]
