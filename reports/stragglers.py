"""Who holds the job back: straggler ranking, collective skew, clock offsets.

Why: a rank that sits in a collective for milliseconds is usually the
victim; the cause is the rank that arrived last. ``fct_stragglers`` ranks
ranks by the waiting their late arrivals cost the others (attribution by
arrival order, see ``int_collective_members_aligned``), and
``fct_collective_ranks`` says, for every collective, how long each member
waited and for whom. Three charts:

1. straggler ranking: waiting caused per rank (summed over iterations,
   the top :data:`TOP_RANKS`), the caption naming iteration by iteration
   the rank that holds the job back;
2. collective skew: rank × collective heatmap of the time each member
   waited (the :data:`TOP_COLLECTIVES` collectives with the most waiting,
   in time order), the caption naming, for the longest waits, the late
   ranks that caused them;
3. clock offsets: the correction applied per rank (``dim_rank_clock_offsets``)
   and how it was estimated.

Reads ``fct_stragglers``, ``fct_collectives``, ``fct_collective_ranks`` and
``dim_rank_clock_offsets``; a run without matched collectives has nothing
to show and says so.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from tracehouse.reports.base import (
    MAX_ROWS_PER_AXIS,
    ChartContext,
    NothingToShow,
    RenderedChart,
    save_figure,
)
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import apply_theme

#: Ranks drawn in the ranking.
TOP_RANKS = 32
#: Collective instances drawn in the skew heatmap.
TOP_COLLECTIVES = 40
#: Waits named in the skew caption.
NAMED_WAITS = 3
#: Late ranks named per wait.
NAMED_LATE_RANKS = 3

_RANKING_SQL = """
    select rank, pp_stage, iteration, wait_caused_ns, times_last, wait_ns,
           compute_vs_stage_median, straggler_rank
    from fct_stragglers where run_id = ?
"""

_COLLECTIVES_SQL = """
    select collective_id, op, iteration, process_group_key, seq, device, is_p2p,
           ranks_matched, ranks_expected, is_ambiguous, first_start_ns, start_skew_ns,
           total_wait_ns, busbw_gbps, last_rank
    from fct_collectives where run_id = ?
    order by total_wait_ns desc, first_start_ns, collective_id
    limit ?
"""

_MEMBERS_SQL = """
    select ranks.collective_id, ranks.rank, ranks.arrival_ns, ranks.wait_ns,
           ranks.wait_caused_ns, ranks.arrival_order
    from fct_collective_ranks as ranks
    where ranks.run_id = ? and list_contains(?, ranks.collective_id)
"""

_OFFSETS_SQL = """
    select rank, host_key, mode, offset_ns, collective_count, is_reference_host
    from dim_rank_clock_offsets where run_id = ? order by rank
"""


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def _label(row: pd.Series) -> str:
    """Short name of a collective instance: op, group and order, iteration."""
    iteration = "" if pd.isna(row["iteration"]) else f" it{int(row['iteration'])}"
    return f"{row['op']} #{int(row['seq'])} {row['process_group_key']}{iteration}"


class StragglersFamily:
    """Who holds the job back (see the module docstring)."""

    name = "stragglers"
    title = "Who holds the job back"
    marts: tuple[str, ...] = (
        "fct_stragglers", "fct_collectives", "fct_collective_ranks", "dim_rank_clock_offsets",
    )

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """Ranking, skew heatmap and clock offsets; NothingToShow without matched collectives."""
        if not all(ctx.has_table(mart) for mart in self.marts):
            return []
        ranking = ctx.df(_RANKING_SQL, [ctx.run_id])
        if ranking.empty:
            raise NothingToShow(
                "No collective of this run was matched across ranks (fct_collectives is "
                "empty for it): the traces hold no NCCL kernels or c10d calls, or only one "
                "rank was loaded.")
        if not (ranking["wait_caused_ns"] > 0).any():
            raise NothingToShow(
                "No rank of this run made another wait: its matched collectives have a "
                "single member or every member arrived together, so there is no straggler "
                "(fct_stragglers.straggler_rank is NULL throughout).")
        apply_theme()
        charts = [self._ranking(ctx, ranking)]
        skew = self._skew(ctx)
        if skew is not None:
            charts.append(skew)
        offsets = self._offsets(ctx)
        if offsets is not None:
            charts.append(offsets)
        return charts

    def _ranking(self, ctx: ChartContext, frame: pd.DataFrame) -> RenderedChart:
        totals = (frame.groupby("rank")
                  .agg(wait_caused_ns=("wait_caused_ns", "sum"),
                       times_last=("times_last", "sum"),
                       wait_ns=("wait_ns", "sum"),
                       pp_stage=("pp_stage", "first"))
                  .sort_values(["wait_caused_ns", "times_last"], ascending=False)
                  .head(TOP_RANKS))
        labels = [f"rank {r}" + ("" if pd.isna(s) else f" · pp{int(s)}")
                  for r, s in zip(totals.index, totals["pp_stage"])]
        fig, ax = plt.subplots(figsize=(10.5, max(2.6, 0.3 * len(totals) + 1.6)))
        y = np.arange(len(totals))
        ax.barh(y - 0.2, totals["wait_caused_ns"] / 1e6, height=0.4, color="#d62728",
                label="waiting caused (others waited for it)")
        ax.barh(y + 0.2, totals["wait_ns"] / 1e6, height=0.4, color="#bab0ac",
                label="waiting suffered (it waited for others)")
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms, summed over the run's matched collectives and P2P transfers")
        ax.legend(loc="lower right")
        ax.set_title(f"Which rank holds the job back — {plain_text(ctx.run_id)}")
        fig.tight_layout()
        firsts = frame[frame["straggler_rank"] == 1].sort_values("iteration")
        parts = []
        for _, row in firsts.iterrows():
            iteration = "outside steps" if pd.isna(row["iteration"]) else \
                f"iteration {int(row['iteration'])}"
            parts.append(f"{iteration}: rank {int(row['rank'])} ({_ms(row['wait_caused_ns'])} "
                         f"caused, last {int(row['times_last'])} times)")
        shown = "" if len(totals) == frame["rank"].nunique() else \
            f" The {len(totals)} ranks that caused most waiting are drawn."
        caption = ("fct_stragglers: waiting each rank's late arrivals cost the other members "
                   "of its collectives (attributed by arrival order; a rank waiting inside a "
                   "collective for a slow peer is a victim, not a cause). First per "
                   f"iteration — {'; '.join(parts)}.{shown}")
        return save_figure(fig, ctx, "stragglers-ranking", "Straggler ranking", caption)

    def _skew(self, ctx: ChartContext) -> RenderedChart | None:
        collectives = ctx.df(_COLLECTIVES_SQL, [ctx.run_id, TOP_COLLECTIVES])
        collectives = collectives[collectives["ranks_matched"] > 1]
        if collectives.empty or float(collectives["total_wait_ns"].sum()) <= 0:
            return None
        ids = collectives["collective_id"].tolist()
        members = ctx.df(_MEMBERS_SQL, [ctx.run_id, ids])
        collectives = collectives.sort_values("first_start_ns")
        names = {row["collective_id"]: _label(row) for _, row in collectives.iterrows()}
        table = members.pivot_table(index="rank", columns="collective_id", values="wait_ns",
                                    aggfunc="sum")
        table = table.reindex(columns=[c for c in collectives["collective_id"]
                                       if c in table.columns])
        if len(table) > MAX_ROWS_PER_AXIS:
            worst = table.sum(axis=1).sort_values(ascending=False).head(MAX_ROWS_PER_AXIS)
            table = table.loc[sorted(worst.index)]
        fig, ax = plt.subplots(figsize=(max(7.0, 0.32 * table.shape[1] + 3.0),
                                        max(2.8, 0.28 * len(table) + 2.4)))
        sns.heatmap(table / 1e6, ax=ax, cmap="Reds", cbar_kws={"label": "wait (ms)"},
                    xticklabels=[plain_text(names[c]) for c in table.columns],
                    yticklabels=[f"rank {r}" for r in table.index], linewidths=0.2)
        ax.set_xlabel("collective (op #order group iteration), in time order")
        ax.set_ylabel("rank")
        ax.tick_params(axis="x", labelsize=7, labelrotation=90)
        ax.tick_params(axis="y", labelsize=8, labelrotation=0)
        ax.set_title(f"Time each member waited in the collectives with most waiting — "
                     f"{plain_text(ctx.run_id)}")
        fig.tight_layout()
        caption = ("fct_collective_ranks.wait_ns (last arrival − own arrival) of the "
                   f"{table.shape[1]} collectives with the most waiting; blank: the rank is "
                   f"not a member. Longest waits — {self._late_ranks(members, names)}.")
        return save_figure(fig, ctx, "stragglers-collective-skew",
                           "Collective skew by rank and collective", caption)

    @staticmethod
    def _late_ranks(members: pd.DataFrame, names: dict[str, str]) -> str:
        """Name the longest waits and the ranks whose late arrival caused them."""
        parts = []
        for _, wait in members.sort_values("wait_ns", ascending=False).head(NAMED_WAITS).iterrows():
            later = members[(members["collective_id"] == wait["collective_id"])
                            & (members["arrival_order"] > wait["arrival_order"])]
            late = later.sort_values("wait_caused_ns", ascending=False).head(NAMED_LATE_RANKS)
            who = ", ".join(f"rank {int(r['rank'])} ({_ms(r['wait_caused_ns'])} caused)"
                            for _, r in late.iterrows())
            parts.append(f"rank {int(wait['rank'])} waited {_ms(wait['wait_ns'])} in "
                         f"{plain_text(names.get(wait['collective_id'], wait['collective_id']))}"
                         f" for {who or 'nobody'}")
        return "; ".join(parts)

    def _offsets(self, ctx: ChartContext) -> RenderedChart | None:
        frame = ctx.df(_OFFSETS_SQL, [ctx.run_id])
        if frame.empty:
            return None
        hosts = (frame.groupby("host_key", sort=False)
                 .agg(offset_ns=("offset_ns", "first"), mode=("mode", "first"),
                      ranks=("rank", "count"), first_rank=("rank", "min"),
                      collectives=("collective_count", "max"))
                 .sort_values("first_rank").head(MAX_ROWS_PER_AXIS))
        fig, ax = plt.subplots(figsize=(9.0, max(2.4, 0.28 * len(hosts) + 1.6)))
        colours = {"collectives": "#4e79a7", "first_step": "#f28e2b", "none": "#bab0ac"}
        y = np.arange(len(hosts))
        ax.barh(y, hosts["offset_ns"] / 1e3, color=[colours.get(m, "#bab0ac")
                                                     for m in hosts["mode"]])
        ax.set_yticks(y)
        ax.set_yticklabels([f"{plain_text(h)} ({n} rank{'s' if n != 1 else ''})"
                            for h, n in zip(hosts.index, hosts["ranks"])], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("clock offset applied (µs; reference clock − host clock)")
        ax.set_title(f"Estimated clock offsets — {plain_text(ctx.run_id)}")
        for mode, colour in colours.items():
            if mode in set(hosts["mode"]):
                ax.barh([], [], color=colour, label=mode)
        ax.legend(title="mode", loc="lower right")
        fig.tight_layout()
        modes = ", ".join(f"{m}: {n}" for m, n in frame["mode"].value_counts().items())
        spread = (frame["offset_ns"].max() - frame["offset_ns"].min()) / 1e3
        caption = ("dim_rank_clock_offsets: the correction added to each host's times so "
                   "that matched collectives end together (mode collectives, median over "
                   "collectives), else the first common ProfilerStep starts together "
                   f"(first_step); reference: the host of the lowest rank. Ranks by mode — "
                   f"{modes}; offsets span {spread:,.1f} µs.")
        return save_figure(fig, ctx, "stragglers-clock-offsets", "Clock offsets", caption)


FAMILY = StragglersFamily()
