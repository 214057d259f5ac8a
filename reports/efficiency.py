"""Achieved TFLOP/s per phase and per pipeline stage.

Why: the roofline says which ops run below their roof; this says where in
the step the GPU's work runs slowly. Forward GEMMs at 60 % of the peak and a
backward at 30 % point at different fixes (the backward's dgrad/wgrad
shapes, recompute), and a pipeline stage whose kernels run slower than the
others' (the embedding's, the loss's) is a balance problem that busy time
alone does not show.

Each bar is a ratio of sums over the run's mart rows, never a mean of
ratios: a phase's FLOPs over the time of its kernels with a FLOP model
(fct_op_efficiency summed by phase), a stage's the same over its ranks
(fct_op_efficiency summed by pp_stage); under the interleaved schedule each
stage's model chunks get a bar each (pp_stage x vpp_chunk, in Megatron's
virtual-stage order), since the chunks hold different layers (the
embedding, the loss), and the stage's kernels outside any chunk (the
optimizer's) one more. The label beside a bar says what share of the
compute time has a model, since the rate speaks only for that share.
Traces recorded without shapes have no FLOPs, so no bars.
"""

from __future__ import annotations

import duckdb
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes

from tracehouse.reports.base import ChartContext, NothingToShow, RenderedChart, save_figure
from tracehouse.reports.kernel_names import plain_text
from tracehouse.reports.style import apply_theme, phase_color

#: Reading order of Megatron's phases; others follow by name.
PHASE_ORDER = ("forward", "backward", "recompute", "optimizer", "pp_p2p", "dp_sync", "other")

_PHASES_SQL = """
    select
        phase,
        sum(flops) as flops,
        sum(modelled_ns) as modelled_ns,
        sum(compute_ns) as compute_ns,
        sum(flops) / nullif(sum(modelled_ns), 0) / 1e3 as achieved_tflops,
        cast(sum(modelled_ns) as double) / nullif(sum(compute_ns), 0) as flop_coverage_ratio
    from fct_op_efficiency
    where run_id = ?
    group by phase
    having sum(flops) > 0
"""
_STAGES_SQL = """
    select
        pp_stage,
        vpp_chunk,
        sum(flops) as flops,
        sum(modelled_ns) as modelled_ns,
        sum(compute_ns) as compute_ns,
        sum(flops) / nullif(sum(modelled_ns), 0) / 1e3 as achieved_tflops,
        cast(sum(modelled_ns) as double) / nullif(sum(compute_ns), 0) as flop_coverage_ratio
    from fct_op_efficiency
    where run_id = ? and pp_stage is not null
    group by pp_stage, vpp_chunk
    having sum(flops) > 0
    order by vpp_chunk nulls last, pp_stage
"""


def phase_rates(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Achieved TFLOP/s and FLOP-model coverage per phase of a run, in reading order."""
    frame = con.execute(_PHASES_SQL, [run_id]).df()
    rank = {phase: index for index, phase in enumerate(PHASE_ORDER)}
    frame["order"] = [rank.get(phase, len(rank)) for phase in frame["phase"]]
    return (frame.sort_values(["order", "phase"]).drop(columns="order")
            .reset_index(drop=True))


def stage_rates(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """Achieved TFLOP/s and FLOP-model coverage per pipeline stage of a run, per model
    chunk too under the interleaved schedule (virtual-stage order, then each stage's
    kernels outside any chunk); without virtual stages vpp_chunk is NULL throughout,
    so one row per stage."""
    return con.execute(_STAGES_SQL, [run_id]).df()


def stage_labels(stages: pd.DataFrame) -> list[str]:
    """``stage 1`` without virtual stages; ``stage 1 · chunk 0`` (and ``stage 1 ·
    outside chunks`` for its optimizer's kernels) with them."""
    chunked = bool(stages["vpp_chunk"].notna().any())
    labels = []
    for stage, chunk in zip(stages["pp_stage"], stages["vpp_chunk"]):
        if not chunked:
            labels.append(f"stage {int(stage)}")
        elif pd.isna(chunk):
            labels.append(f"stage {int(stage)} · outside chunks")
        else:
            labels.append(f"stage {int(stage)} · chunk {int(chunk)}")
    return labels


def _bars(ax: Axes, labels: list[str], frame: pd.DataFrame, colors: list[str]) -> None:
    ax.barh(labels, frame["achieved_tflops"], color=colors, edgecolor="black", linewidth=0.5)
    ax.invert_yaxis()
    for y, (rate, coverage) in enumerate(zip(frame["achieved_tflops"],
                                             frame["flop_coverage_ratio"])):
        ax.annotate(f"{rate:.3g} TFLOP/s ({100 * coverage:.0f} % modelled)", (rate, y),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, float(frame["achieved_tflops"].max()) * 1.6)
    ax.set_xlabel("achieved TFLOP/s (FLOPs / time of the kernels with a model)")


def _no_bars(ax: Axes, reason: str) -> None:
    ax.text(0.5, 0.5, reason, ha="center", va="center", fontsize=9, transform=ax.transAxes)
    ax.axis("off")


class EfficiencyFamily:
    """Achieved TFLOP/s per phase and per pipeline stage (see the module docstring)."""

    name = "efficiency"
    title = "How fast the GPU work runs, per phase and per pipeline stage"
    marts: tuple[str, ...] = ("fct_op_efficiency",)

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """One figure: phases left, stages right; NothingToShow when no kernel has FLOPs."""
        if not all(ctx.has_table(mart) for mart in self.marts):
            return []
        phases = phase_rates(ctx.con, ctx.run_id)
        if phases.empty:
            raise NothingToShow(
                "no kernel of this run has FLOPs: its traces were recorded without "
                "record_shapes (fct_kernels.flops_null_reason says no_shapes), or none of "
                "their ops has a FLOP model (seed op_flop_models)")
        stages = stage_rates(ctx.con, ctx.run_id)
        apply_theme()
        fig, (by_phase, by_stage) = plt.subplots(
            1, 2, figsize=(11, 0.5 * max(len(phases), len(stages), 3) + 1.8))
        _bars(by_phase, [plain_text(phase) for phase in phases["phase"]], phases,
              [phase_color(phase) for phase in phases["phase"]])
        by_phase.set_title("per phase (fct_op_efficiency)")
        if stages.empty:
            stage_note = ("no pipeline stages: the run has no topology (dim_ranks.pp_stage "
                          "is NULL), or no stage's kernels have FLOPs")
            _no_bars(by_stage, "no pipeline stages:\nthe run has no topology\n"
                     "(dim_ranks.pp_stage is NULL),\nor no stage's kernels have FLOPs")
        else:
            stage_note = ""
            _bars(by_stage, stage_labels(stages), stages,
                  ["#4c72b0" if pd.isna(chunk) or int(chunk) % 2 == 0 else "#8172b2"
                   for chunk in stages["vpp_chunk"]])
        by_stage.set_title("per pipeline stage (fct_op_efficiency)")
        fig.suptitle("Achieved TFLOP/s — " + plain_text(ctx.run_id))
        fig.tight_layout()
        caption = (
            "Each bar is a ratio of sums over the run's rows: the FLOPs of the phase's (or "
            "stage's) compute kernels over the time of those with a FLOP model, beside it the "
            "share of its compute time that has one (the rate speaks for that share only). "
            "FLOPs come from the launching ops' recorded shapes (fct_kernels.flops).")
        if stage_note:
            caption += " Right: " + stage_note + "."
        elif stages["vpp_chunk"].notna().any():
            caption += (" Right: one bar per model chunk of each stage (the interleaved "
                        "schedule's virtual stages: chunk c of stage s holds the layers of "
                        "virtual stage c x pp_size + s), and one for the stage's kernels "
                        "outside any chunk (the optimizer's) where they have FLOPs.")
        return [save_figure(fig, ctx, "efficiency_phase_stage",
                            "Achieved TFLOP/s per phase and pipeline stage", caption)]


FAMILY = EfficiencyFamily()
