"""How well the GPU's work uses it: a roofline of the run's kernels, by launching op.

Why a roofline: "GEMMs take 60 % of the step" does not say whether they run
well. Each point is one CPU op name (``aten::mm``, flash attention, ``add_``,
...) over the whole run: x its arithmetic intensity (FLOPs per byte moved),
y its achieved TFLOP/s, both as ratios of sums over its compute kernels
(fct_op_efficiency's rows of the run), the marker's area their GPU time;
the caption's coverage is fct_rank_efficiency's. The lines are the GPU's
roofs (seed gpu_peaks): memory bandwidth up the slope, each dense peak the
run's ops are measured against flat on top. A point far below its roof is
the one to look at; a point above it means a wrong attribution. Ops with
bytes but no FLOPs (copies, fills) cannot sit on a log axis and are counted
in the caption only.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from tracehouse.reports.base import ChartContext, NothingToShow, RenderedChart, save_figure
from tracehouse.reports.kernel_names import plain_text
from tracehouse.reports.style import apply_theme

#: Ops drawn at most (by GPU time); the rest are summed in the caption.
MAX_OPS = 24

_OPS_SQL = """
    select
        cpu_op_name,
        flop_model,
        gpu_product,
        sum(flops) as flops,
        sum(bytes) as bytes,
        sum(modelled_ns) as dur_ns,
        sum(kernels) as kernels
    from fct_op_efficiency
    where run_id = ? and flops > 0 and bytes > 0 and gpu_product is not null
    group by all
    order by dur_ns desc
"""
_ROOFS_SQL = """
    select gpu_product, peak_tflops, max(peak_tbps) as peak_tbps
    from fct_kernels
    where run_id = ? and flops > 0 and peak_tflops is not null
    group by all
    order by gpu_product, peak_tflops
"""
_COVERAGE_SQL = """
    select sum(modelled_ns), sum(compute_ns)
    from fct_rank_efficiency
    where run_id = ?
"""


class RooflineFamily:
    """The run's ops against their GPU's roofs (see the module docstring)."""

    name = "roofline"
    title = "How well the kernels use the GPU (roofline)"
    marts: tuple[str, ...] = ("fct_op_efficiency", "fct_rank_efficiency", "fct_kernels")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One log-log roofline; NothingToShow when no kernel has a FLOP model and a GPU."""
        if not all(ctx.has_table(mart) for mart in self.marts):
            return []
        ops = ctx.df(_OPS_SQL, [ctx.run_id])
        if ops.empty:
            raise NothingToShow(
                "no kernel of this run has both FLOPs and a known GPU: the traces were "
                "recorded without record_shapes (fct_kernels.flops_null_reason says so "
                "per kernel), or the GPU is not in seed gpu_peaks (set var gpu_product)")
        roofs = ctx.df(_ROOFS_SQL, [ctx.run_id])
        apply_theme()
        shown = ops.head(MAX_OPS)
        intensity = shown["flops"] / shown["bytes"]
        tflops = shown["flops"] / shown["dur_ns"] / 1e3
        fig, ax = plt.subplots(figsize=(8.5, 5.5))
        sizes = 20 + 400 * shown["dur_ns"] / float(shown["dur_ns"].max())
        ax.scatter(intensity, tflops, s=sizes, alpha=0.6, color="#1f77b4", edgecolor="black",
                   linewidth=0.5, zorder=3)
        for x, y, name in zip(intensity, tflops, shown["cpu_op_name"]):
            ax.annotate(plain_text(name), (x, y), fontsize=7, xytext=(4, 2),
                        textcoords="offset points")
        low = min(float(intensity.min()), 0.1) / 2
        high = max(float(intensity.max()), 1000.0) * 2
        xs = np.geomspace(low, high, 200)
        for _, roof in roofs.iterrows():
            line = np.minimum(float(roof["peak_tflops"]), xs * float(roof["peak_tbps"]))
            ax.plot(xs, line, color="#d62728", linewidth=1.2, zorder=2)
            ax.annotate(f"{plain_text(roof['gpu_product'])} {float(roof['peak_tflops']):g} TFLOP/s",
                        (high, float(roof["peak_tflops"])), fontsize=7, ha="right",
                        va="bottom", color="#d62728")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
        ax.set_ylabel("achieved TFLOP/s (ratio of sums over the op's kernels)")
        ax.set_title("Roofline by launching op — " + plain_text(ctx.run_id))
        fig.tight_layout()
        modelled, compute = ctx.con.execute(_COVERAGE_SQL, [ctx.run_id]).fetchone()
        coverage = (float(modelled or 0) / float(compute)) if compute else 0.0
        caption = (
            f"Each point is one CPU op over the run ({len(shown)} of {len(ops)} ops with "
            "FLOPs, by GPU time; the area is its GPU time): FLOPs from its recorded shapes "
            "(fct_kernels.flops), rate = its FLOPs over its kernels' time. Red lines: the "
            "GPU's roofs, min(peak, intensity × HBM bandwidth), for the dense peaks the ops "
            f"are measured against (seed gpu_peaks). {100 * coverage:.1f} % of the "
            "compute-kernel time of the run's traces recorded with shapes has a FLOP or "
            "byte model; copies and fills (bytes only) and unmodelled ops are not drawn.")
        return [save_figure(fig, ctx, "roofline", "Roofline by launching op", caption)]


FAMILY = RooflineFamily()
