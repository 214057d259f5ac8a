"""Two runs side by side: step time per iteration, and where a step's time goes.

Why: most questions are comparative — did the new schedule, the bigger
microbatch or the fixed straggler make steps faster, and which part moved?
Both charts read the same rows as the rest of the report
(``fct_step_breakdown``: the run's timing scope and step rule), so
a run with GPU kernels is broken down into compute, overlap, exposed
communication, exposed memory and idle (which add up to the step), and a
CPU-only run into its step frames. Renders only when the report has a
comparison run (``tracehouse report --compare RUN``); otherwise [].
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tracehouse.reports.base import ChartContext, RenderedChart, save_figure
from tracehouse.reports.html import timing_source
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import KIND_COLORS, PHASE_COLORS, apply_theme

#: GPU breakdown: (column, label, colour); the parts add up to span_ns.
GPU_PARTS = (
    ("compute_only_ns", "compute (not overlapped)", KIND_COLORS["compute"]),
    ("overlap_ns", "compute ∩ communication", KIND_COLORS["overlap"]),
    ("exposed_communication_ns", "exposed communication", KIND_COLORS["exposed_communication"]),
    ("exposed_memory_ns", "exposed memory", KIND_COLORS["memory"]),
    ("idle_ns", "idle", KIND_COLORS["idle"]),
)
#: CPU breakdown from step frames; "other" is the rest of the step (never negative).
CPU_PARTS = (
    ("compute_ns", "forward + backward frames", PHASE_COLORS["forward"]),
    ("comm_ns", "pp_p2p + dp_sync frames", PHASE_COLORS["pp_p2p"]),
    ("optimizer_ns", "optimizer", PHASE_COLORS["optimizer"]),
    ("other_ns", "rest of the step", PHASE_COLORS["other"]),
)
RUN_COLORS = ("#4e79a7", "#f28e2b")

_GPU_SQL = """
    select rank, iteration, step_ns, compute_only_ns, overlap_ns, exposed_communication_ns,
           exposed_memory_ns, idle_ns
    from fct_step_breakdown where run_id = $run
"""
_CPU_SQL = """
    select rank, iteration, step_ns, compute_ns, comm_frames_ns as comm_ns, optimizer_ns,
           other_ns
    from fct_step_breakdown where run_id = $run
"""


@dataclass
class RunTimings:
    """One run's per rank-iteration timings and which breakdown applies."""

    run_id: str
    source: str
    frame: pd.DataFrame
    parts: tuple[tuple[str, str, str], ...]


def load_run(ctx: ChartContext, run_id: str) -> RunTimings | None:
    """The run's rank-iteration timings from the marts, or None when it has none."""
    source = timing_source(ctx.con, run_id)
    if source == "none":
        return None
    sql, parts = (_GPU_SQL, GPU_PARTS) if source == "gpu" else (_CPU_SQL, CPU_PARTS)
    frame = ctx.con.execute(sql, {"run": run_id}).df()
    if frame.empty:
        return None
    for column in ["step_ns", *(p[0] for p in parts)]:
        frame[column] = frame[column].astype(float) / 1e6  # ms
    return RunTimings(run_id, source, frame, parts)


class CompareFamily:
    """Two runs side by side (see the module docstring)."""

    name = "compare"
    title = "Run comparison"
    marts: tuple[str, ...] = ("fct_run_summary", "fct_step_breakdown")

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """Step time per iteration and the step breakdown of both runs; [] without a second run."""
        if not ctx.compare_run_id:
            return []
        runs = [load_run(ctx, ctx.run_id), load_run(ctx, ctx.compare_run_id)]
        present = [run for run in runs if run is not None]
        if len(present) < 2:
            return []
        apply_theme()
        return [self._steps(ctx, present), self._breakdown(ctx, present)]

    def _steps(self, ctx: ChartContext, runs: list[RunTimings]) -> RenderedChart:
        stats = []
        for run in runs:
            per_it = (run.frame.groupby("iteration", dropna=False)["step_ns"]
                      .agg(["mean", "min", "max"]).reset_index()
                      .sort_values("iteration", na_position="last").reset_index(drop=True))
            stats.append(per_it)
        positions = max(len(s) for s in stats)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.3 * positions + 3.5), 4.2))
        width = 0.38
        for i, (run, per_it) in enumerate(zip(runs, stats)):
            x = np.arange(len(per_it)) + (i - 0.5) * width
            err = np.vstack([per_it["mean"] - per_it["min"], per_it["max"] - per_it["mean"]])
            ax.bar(x, per_it["mean"], width, yerr=err, capsize=3, color=RUN_COLORS[i],
                   label=plain_text(f"{run.run_id} ({run.source})"))
            for xi, value in zip(x, per_it["mean"]):
                ax.annotate(f"{value:.1f}", (xi, value), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 2), textcoords="offset points")
        ticks = []
        for pos in range(positions):
            names = []
            for per_it in stats:
                if pos < len(per_it):
                    it = per_it.loc[pos, "iteration"]
                    names.append("outside" if pd.isna(it) else f"it {int(it)}")
                else:
                    names.append("—")
            ticks.append(f"#{pos + 1}\n" + " / ".join(names))
        ax.set_xticks(np.arange(positions))
        ax.set_xticklabels(ticks)
        ax.set_xlabel("traced iteration (in order; iteration numbers of each run below)")
        ax.set_ylabel("step time (ms): mean over ranks, bars min–max")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Step time per iteration — "
                     + plain_text(f"{runs[0].run_id} vs {runs[1].run_id}"))
        fig.tight_layout()
        means = [float(run.frame["step_ns"].mean()) for run in runs]
        delta = 100 * (means[1] - means[0]) / means[0] if means[0] else float("nan")
        caption = (f"Mean step time {runs[0].run_id}: {means[0]:.2f} ms, {runs[1].run_id}: "
                   f"{means[1]:.2f} ms ({delta:+.1f} % for the second). Iterations are "
                   "matched by position, not number. GPU runs: the GPU step (fct_rank_steps: "
                   "first kernel of a step to the first of the next); CPU-only runs: first "
                   "to last step frame.")
        return save_figure(fig, ctx, "compare-step-time", "Step time per iteration, both runs",
                           caption)

    def _breakdown(self, ctx: ChartContext, runs: list[RunTimings]) -> RenderedChart:
        fig, ax = plt.subplots(figsize=(10, 3.2))
        seen: set[str] = set()
        scale = max(float(run.frame["step_ns"].mean()) for run in runs)
        for i, run in enumerate(runs):
            left = 0.0
            for column, label, color in run.parts:
                value = float(run.frame[column].mean())
                if not value > 0:
                    continue  # nothing to draw, and no legend entry for it
                ax.barh(i, value, left=left, color=color,
                        label=None if label in seen else label, edgecolor="white")
                if value > 0.06 * scale:
                    ax.text(left + value / 2, i, f"{value:.1f}", ha="center", va="center",
                            fontsize=7, color="black")
                seen.add(label)
                left += value
            ax.text(left, i, f"  {float(run.frame['step_ns'].mean()):.1f} ms step",
                    va="center", fontsize=8)
        ax.set_yticks([0, 1])
        ax.set_yticklabels([plain_text(f"{r.run_id}\n({r.source})") for r in runs])
        ax.invert_yaxis()
        ax.set_xlim(0, ax.get_xlim()[1] * 1.15)
        ax.set_xlabel("mean per rank and iteration (ms)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Where a step's time goes")
        fig.tight_layout()
        caption = ("Mean per rank and iteration. Runs with GPU kernels: compute not "
                   "overlapped, compute overlapped with communication, exposed communication, "
                   "exposed memory and idle add up to the step (fct_rank_iterations). "
                   "CPU-only runs: time in Megatron's step frames (they can nest, so the rest "
                   "of the step is clipped at zero).")
        return save_figure(fig, ctx, "compare-breakdown", "Step breakdown, both runs", caption)


FAMILY = CompareFamily()
