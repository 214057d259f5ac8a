"""Two runs side by side: step time per iteration, and where a step's time goes.

Why: most questions are comparative — did the new schedule, the bigger
microbatch or the fixed straggler make steps faster, and which part moved?
Both charts read the same marts as the rest of the report and
``tracehouse compare``: the iteration's step time is
``fct_iteration_summary.step_ns`` (the slowest rank's step), and a step
is broken down into ``fct_rank_iterations``' exclusive parts (compute,
overlap, exposed communication, exposed memory, optimizer, idle), which add
up to the step on every row, so their means add up to the mean rank step.
Renders only when the report has a comparison run (``tracehouse report
--compare RUN``); otherwise [].
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

#: The step's exclusive parts per timing source: (column, label, colour).
#: They add up to step_ns on every row of fct_rank_iterations.
GPU_PARTS = (
    ("step_compute_ns", "compute (no communication)", KIND_COLORS["compute"]),
    ("step_overlap_ns", "compute ∥ communication", KIND_COLORS["overlap"]),
    ("step_exposed_communication_ns", "exposed communication",
     KIND_COLORS["exposed_communication"]),
    ("step_exposed_memory_ns", "exposed memory", KIND_COLORS["memory"]),
    ("step_idle_ns", "rank idle", KIND_COLORS["idle"]),
)
CPU_PARTS = (
    ("step_compute_ns", "forward + backward frames", PHASE_COLORS["forward"]),
    ("step_exposed_communication_ns", "pp_p2p + dp_sync frames", PHASE_COLORS["pp_p2p"]),
    ("step_optimizer_ns", "optimizer", PHASE_COLORS["optimizer"]),
    ("step_idle_ns", "outside step frames", PHASE_COLORS["other"]),
)
RUN_COLORS = ("#4e79a7", "#f28e2b")

_PARTS_SQL = """
    select rank, iteration, step_ns, step_compute_ns, step_overlap_ns,
           step_exposed_communication_ns, step_exposed_memory_ns, step_optimizer_ns,
           step_idle_ns
    from fct_rank_iterations where run_id = $run and step_ns is not null
"""
_ITERATIONS_SQL = """
    select iteration, step_ns, slowest_rank
    from fct_iteration_summary where run_id = $run
    order by iteration nulls last
"""
_RUN_SQL = "select mean_step_ns, mean_rank_step_ns from fct_run_summary where run_id = $run"


@dataclass
class RunTimings:
    """One run's rank-iteration parts, iteration steps and run means."""

    run_id: str
    source: str
    frame: pd.DataFrame
    iterations: pd.DataFrame
    mean_step_ms: float
    mean_rank_step_ms: float
    parts: tuple[tuple[str, str, str], ...]


def load_run(ctx: ChartContext, run_id: str) -> RunTimings | None:
    """The run's timings from the marts, or None when it has none."""
    source = timing_source(ctx.con, run_id)
    if source == "none":
        return None
    parts = GPU_PARTS if source == "gpu" else CPU_PARTS
    frame = ctx.con.execute(_PARTS_SQL, {"run": run_id}).df()
    iterations = ctx.con.execute(_ITERATIONS_SQL, {"run": run_id}).df()
    means = ctx.con.execute(_RUN_SQL, {"run": run_id}).fetchone()
    if frame.empty or iterations.empty or means is None:
        return None
    for column in ["step_ns", *(p[0] for p in parts)]:
        frame[column] = frame[column].astype(float) / 1e6  # ms
    iterations["step_ns"] = iterations["step_ns"].astype(float) / 1e6
    return RunTimings(run_id, source, frame, iterations, float(means[0]) / 1e6,
                      float(means[1]) / 1e6, parts)


class CompareFamily:
    """Two runs side by side (see the module docstring)."""

    name = "compare"
    title = "Run comparison"
    marts: tuple[str, ...] = ("fct_run_summary", "fct_iteration_summary", "fct_rank_iterations")

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
        positions = max(len(run.iterations) for run in runs)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.3 * positions + 3.5), 4.2))
        width = 0.38
        for i, run in enumerate(runs):
            per_it = run.iterations
            x = np.arange(len(per_it)) + (i - 0.5) * width
            ax.bar(x, per_it["step_ns"], width, color=RUN_COLORS[i],
                   label=plain_text(f"{run.run_id} ({run.source})"))
            for xi, value, rank in zip(x, per_it["step_ns"], per_it["slowest_rank"]):
                ax.annotate(f"{value:.1f}\nr{int(rank)}", (xi, value), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
        ticks = []
        for pos in range(positions):
            names = []
            for run in runs:
                if pos < len(run.iterations):
                    it = run.iterations.loc[pos, "iteration"]
                    names.append("whole trace" if pd.isna(it) else f"it {int(it)}")
                else:
                    names.append("—")
            ticks.append(f"#{pos + 1}\n" + " / ".join(names))
        ax.set_xticks(np.arange(positions))
        ax.set_xticklabels(ticks)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
        ax.set_xlabel("traced iteration (in order; iteration numbers of each run below)")
        ax.set_ylabel("step time (ms): the slowest rank's step")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Step time per iteration — "
                     + plain_text(f"{runs[0].run_id} vs {runs[1].run_id}"))
        fig.tight_layout()
        means = [run.mean_step_ms for run in runs]
        delta = 100 * (means[1] - means[0]) / means[0] if means[0] else float("nan")
        caption = (f"Mean step time {runs[0].run_id}: {means[0]:.2f} ms, {runs[1].run_id}: "
                   f"{means[1]:.2f} ms ({delta:+.1f} % for the second; fct_run_summary). "
                   "Each bar is the iteration's step time, the slowest rank's step "
                   "(fct_iteration_summary, as `tracehouse compare` prints it), labelled "
                   "with that rank. Iterations are matched by position, not number.")
        return save_figure(fig, ctx, "compare-step-time", "Step time per iteration, both runs",
                           caption)

    def _breakdown(self, ctx: ChartContext, runs: list[RunTimings]) -> RenderedChart:
        fig, ax = plt.subplots(figsize=(10, 3.2))
        seen: set[str] = set()
        scale = max(run.mean_rank_step_ms for run in runs)
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
            ax.text(left, i, f"  {run.mean_rank_step_ms:.1f} ms mean rank step",
                    va="center", fontsize=8)
        ax.set_yticks([0, 1])
        ax.set_yticklabels([plain_text(f"{r.run_id}\n({r.source})") for r in runs])
        ax.invert_yaxis()
        ax.set_xlim(0, ax.get_xlim()[1] * 1.3)
        ax.set_xlabel("mean per rank and iteration (ms)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Where a step's time goes")
        fig.tight_layout()
        caption = ("Mean per rank and iteration of the step's exclusive parts "
                   "(fct_rank_iterations), which add up to the mean rank step "
                   "(fct_run_summary.mean_rank_step_ns). Runs with GPU kernels: compute "
                   "alone, compute overlapped with communication, exposed communication, "
                   "exposed memory and rank idle. CPU-only runs: the innermost Megatron step "
                   "frame (communication, then optimizer, then forward/backward) and the time "
                   "outside them.")
        return save_figure(fig, ctx, "compare-breakdown", "Step breakdown, both runs", caption)


FAMILY = CompareFamily()
