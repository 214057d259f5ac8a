"""What would help most: the what-if scenarios ranked by the time each would save.

Why: the report names the straggler and splits the bubble, and the reader's
next question is which fix to make first. Each scenario of fct_what_if
(the dependency replay with the scenario's durations: no straggler, ideal
communication, perfect overlap, balanced stages, no host gaps) is ranked
by its mean saved_ns over the run's iterations; its share of the step is a
ratio of sums (sum saved / sum step over the iterations, share_of_sums'
rule), so it is not the mean of the iterations' saved_ratio. The figures
come from fct_what_if alone; the scenarios' rules are in
int_whatif_work_scaled's docstring and README's question table. Every
build makes the what-if marts unless given ``--vars '{whatif: false}'``;
without them the section says so and how to build them.
"""

from __future__ import annotations

import duckdb
import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import ChartContext, NothingToShow, RenderedChart, save_figure
from tracehouse.reports.kernel_names import plain_text
from tracehouse.reports.style import apply_theme

#: One row per scenario of the run, most time saved first (ties: by name).
_SAVINGS_SQL = """
    select
        scenario,
        count(*) as iterations,
        avg(step_ns) as step_ns,
        avg(predicted_step_ns) as predicted_step_ns,
        avg(saved_ns) as saved_ns,
        cast(sum(saved_ns) as double) / nullif(sum(step_ns), 0) as saved_share
    from fct_what_if
    where run_id = ?
    group by scenario
    order by saved_ns desc, scenario
"""

#: What each standard scenario changes, for the table (int_whatif_work_scaled).
SCENARIO_LABELS = {
    "no_straggler": "every rank's compute at its stage's median",
    "ideal_communication": "transfers at the set bus bandwidth",
    "perfect_overlap": "every transfer hidden behind compute",
    "perfect_dp_overlap": "data-parallel transfers hidden behind compute",
    "balanced_stages": "every stage's compute at the mean stage's",
    "no_host_gaps": "no host time before launches",
}

#: The build that makes fct_what_if: a plain one, without the opt-out.
BUILD_HINT = "tracehouse build"


def scenario_savings(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """fct_what_if of a run per scenario: means over its iterations and the saved
    share (ratio of sums), most saved first."""
    return con.execute(_SAVINGS_SQL, [run_id]).df()


def saving_line(row: pd.Series) -> str:
    """The caption's figure for one scenario: ``name: saves X ms of Y ms (Z %)``."""
    return (f"{row['scenario']}: saves {row['saved_ns'] / 1e6:.3f} ms of "
            f"{row['step_ns'] / 1e6:.3f} ms ({100 * row['saved_share']:.1f} %)")


def _bars(ctx: ChartContext, savings: pd.DataFrame) -> RenderedChart:
    """Horizontal bars: each scenario's saved share of the step, most first."""
    apply_theme()
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(savings) + 1.8))
    percent = 100 * savings["saved_share"].astype(float)
    colours = ["#55a868" if value >= 0 else "#c44e52" for value in percent]
    labels = [plain_text(str(name)) for name in savings["scenario"]]
    ax.barh(labels, percent, color=colours, edgecolor="black", linewidth=0.5)
    ax.invert_yaxis()  # most saved on top
    for y, (value, saved) in enumerate(zip(percent, savings["saved_ns"])):
        ax.annotate(f"{value:.1f} % ({saved / 1e6:.2f} ms)", (max(value, 0.0), y),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlim(min(0.0, float(percent.min()) * 1.2), max(float(percent.max()), 1.0) * 1.35)
    ax.set_xlabel("time saved (% of the measured step over all iterations)")
    ax.set_title("What would help most — " + plain_text(ctx.run_id))
    fig.tight_layout()
    caption = (
        "Each bar: a what-if scenario replayed over the run's dependency graph "
        "(fct_what_if), the time it saves as a share of the measured step (sum saved / sum "
        "step over the iterations), most first; red would be slower. Ranked: "
        + "; ".join(saving_line(row) for _index, row in savings.iterrows()) + ".")
    return save_figure(fig, ctx, "whatif_savings", "Time each fix would save", caption)


def _table(ctx: ChartContext, savings: pd.DataFrame) -> RenderedChart:
    """The same ranking as a table: step, predicted step, saved, share."""
    apply_theme()
    rows = [[str(rank), plain_text(str(row["scenario"])),
             SCENARIO_LABELS.get(str(row["scenario"]), ""),
             f"{row['step_ns'] / 1e6:.3f}", f"{row['predicted_step_ns'] / 1e6:.3f}",
             f"{row['saved_ns'] / 1e6:.3f}", f"{100 * row['saved_share']:.1f} %"]
            for rank, (_index, row) in enumerate(savings.iterrows(), start=1)]
    fig, ax = plt.subplots(figsize=(10.5, 0.32 * len(rows) + 0.9))
    ax.axis("off")
    table = ax.table(cellText=rows, loc="center", cellLoc="left",
                     colLabels=["#", "scenario", "what it changes", "step (ms)",
                                "predicted (ms)", "saved (ms)", "saved share"])
    table.auto_set_font_size(False)
    table.set_fontsize(8.5)
    table.auto_set_column_width(list(range(7)))
    table.scale(1.0, 1.35)
    fig.tight_layout()
    caption = (
        f"fct_what_if per scenario, means over the run's {int(savings['iterations'].max())} "
        "iteration(s): the measured step (the slowest rank's), the step the replay predicts "
        "under the scenario, the time saved and its share of the step (a ratio of sums). "
        f"A scenario of your own: tracehouse whatif --scale 'rank=6,kind=compute:0.5'.")
    return save_figure(fig, ctx, "whatif_table", "What each fix would save, as a table",
                       caption)


class WhatifFamily:
    """What would help most (see the module docstring)."""

    name = "whatif"
    title = "What would help most"
    marts: tuple[str, ...] = ("fct_what_if",)

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """The ranking as bars and as a table; NothingToShow without the what-if marts."""
        if not ctx.has_table("fct_what_if"):
            raise NothingToShow(
                "the warehouse was built without the what-if models (`--vars '{whatif: false}'` "
                "leaves them out); build it again with `" + BUILD_HINT + "` and render the "
                "report again to rank what each fix would save")
        savings = scenario_savings(ctx.con, ctx.run_id)
        if savings.empty:
            raise NothingToShow(
                "fct_what_if has no row for this run: the dependency replay needs GPU "
                "kernels with their launches (fct_step_replay)")
        return [_bars(ctx, savings), _table(ctx, savings)]


FAMILY = WhatifFamily()
