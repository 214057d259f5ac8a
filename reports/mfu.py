"""MFU per iteration: the share of the GPUs' peak that training used, Megatron's way.

Why: the MFU card gives the run's one number; iterations that fall below it
(a straggler, a checkpoint, a data stall) are what a reader then looks for.
Each bar is fct_iteration_efficiency's `mfu` of one iteration: Megatron's
model FLOPs of the iteration over its step (the slowest rank's) x the world
size x the GPU's dense peak for the training dtype; the line is the run's
(fct_run_efficiency.mfu, a ratio of sums over the iterations, so it is not
the bars' mean). Runs without a model config (model_config.json from the
Megatron patch or `tracehouse simulate`) have no MFU.
"""

from __future__ import annotations

import duckdb
import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import ChartContext, NothingToShow, RenderedChart, save_figure
from tracehouse.reports.kernel_names import plain_text
from tracehouse.reports.style import apply_theme

_ITERATIONS_SQL = """
    select iteration, step_ns, achieved_tflops_per_gpu, peak_tflops, mfu
    from fct_iteration_efficiency
    where run_id = ?
    order by iteration
"""
_RUN_SQL = """
    select mfu, achieved_tflops_per_gpu, gpu_product, params_dtype, peak_tflops
    from fct_run_efficiency
    where run_id = ?
"""


def iteration_mfu(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """fct_iteration_efficiency's rows of a run, by iteration."""
    return con.execute(_ITERATIONS_SQL, [run_id]).df()


class MfuFamily:
    """MFU per iteration against the run's (see the module docstring)."""

    name = "mfu"
    title = "Model FLOPs utilisation (MFU) per iteration"
    marts: tuple[str, ...] = ("fct_iteration_efficiency", "fct_run_efficiency")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One bar chart; NothingToShow without a model config or a known GPU peak."""
        if not all(ctx.has_table(mart) for mart in self.marts):
            return []
        iterations = iteration_mfu(ctx.con, ctx.run_id)
        if iterations.empty:
            raise NothingToShow(
                "no model/batch config for this run: MFU needs Megatron's model FLOPs, from "
                "the model_config.json the Megatron patch (or tracehouse simulate) writes "
                "beside the topology")
        rated = iterations[iterations["mfu"].notna()]
        if rated.empty:
            raise NothingToShow(
                "the run's GPU or training dtype has no dense peak (seed gpu_peaks): set var "
                "gpu_product to the GPU the run used")
        run = ctx.con.execute(_RUN_SQL, [ctx.run_id]).fetchone()
        apply_theme()
        fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(rated) + 3), 4))
        labels = [str(int(it)) for it in rated["iteration"]]
        percent = 100 * rated["mfu"].astype(float)
        ax.bar(labels, percent, color="#4c72b0", edgecolor="black", linewidth=0.5)
        for x, (value, tflops) in enumerate(zip(percent, rated["achieved_tflops_per_gpu"])):
            ax.annotate(f"{value:.1f} %\n{tflops:.3g} TFLOP/s", (x, value), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
        caption = (
            "Bars: each iteration's MFU (fct_iteration_efficiency.mfu), Megatron's model FLOPs "
            "over the step x world size x the GPU's dense peak; under each percentage its "
            "TFLOP/s per GPU (Megatron's logged throughput).")
        if run is not None and run[0] is not None:
            mfu, tflops, gpu, dtype, peak = run
            ax.axhline(100 * mfu, color="#d62728", linewidth=1.2,
                       label=f"run: {100 * mfu:.1f} %")
            ax.legend(loc="lower right", fontsize=8)
            caption += (
                f" Red line: the run's MFU, {100 * mfu:.1f} % ({tflops:.3g} TFLOP/s per GPU "
                f"against {plain_text(str(gpu))}'s {peak:g} TFLOP/s {plain_text(str(dtype))} "
                "peak; fct_run_efficiency, a ratio of sums over the iterations).")
        ax.set_ylim(0, max(float(percent.max()), 1.0) * 1.3)
        ax.set_xlabel("iteration")
        ax.set_ylabel("MFU (% of the dense peak)")
        ax.set_title("MFU per iteration — " + plain_text(ctx.run_id))
        fig.tight_layout()
        return [save_figure(fig, ctx, "mfu_iterations", "MFU per iteration", caption)]


FAMILY = MfuFamily()
