"""Communication time by process-group kind (tp, cp, ep, dp, pp, …), per rank or stage.

Why: "too much communication" is only actionable once you know *which*
group carries it — tensor-parallel all-reduces inside a node, data-parallel
gradient reductions across nodes, or pipeline send/receive waiting on the
previous stage. ``fct_group_communication`` sums communication kernel
durations by ``fct_kernels.comm_group_kind`` (durations summed, so
concurrent kernels both count — this is load, not wall time; see the
heatmaps for exposed time); this family draws it. When no kernel's group is known (traces without
process-group args or topology, e.g. the DLRM job), it draws nothing and
says why (:class:`~tracehouse.reports.base.NothingToShow`). A CPU-only run
(gloo, no kernels) gets the same bars from its c10d calls in
``fct_cpu_collectives``, summed by the same mart. Up to 64 ranks
there is one bar per rank; beyond that one bar per pipeline stage (mean per
rank), or per block of consecutive ranks when stages are unknown. Reads
``fct_group_communication`` only.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from tracehouse.reports.base import (
    MAX_ROWS_PER_AXIS,
    ChartContext,
    NothingToShow,
    RenderedChart,
    save_figure,
)
from tracehouse.reports.kernels import plain_text
from tracehouse.reports.style import PHASE_COLORS, UNKNOWN_COLOR, apply_theme, phase_color

#: Group kinds in reading order (fct_kernels.comm_group_kind), each with a fixed colour.
GROUP_COLORS: dict[str, str] = {
    "tp": "#4e79a7",
    "cp": "#76b7b2",
    "ep": "#b07aa1",
    "etp": "#ff9da7",
    "edp": "#9c755f",
    "dp": "#e15759",
    "pp": "#f28e2b",
    "embedding": "#59a14f",
    "model": "#edc948",
    "world": "#8cd17d",
    "unknown": "#bab0ac",
}

_SQL = """
    select rank, group_kind, phase, pp_stage, call_count as kernel_count,
           summed_dur_ns as dur_ns, counted_from
    from fct_group_communication
    where run_id = ?
"""


def group_color(kind: str) -> str:
    """Fixed colour of a group kind; grey for one not in :data:`GROUP_COLORS`."""
    return GROUP_COLORS.get(kind, UNKNOWN_COLOR)


def _group_order(kinds: pd.Series) -> list[str]:
    present = set(kinds)
    known = [k for k in GROUP_COLORS if k in present]
    return known + sorted(present - set(known))


class CommGroupsFamily:
    """Communication time by group kind (see the module docstring)."""

    name = "comm_groups"
    title = "Communication time by process-group kind"
    marts: tuple[str, ...] = ("fct_group_communication",)

    def render(self, ctx: ChartContext) -> list[RenderedChart]:
        """Bars by group kind per rank (or stage), then kind × phase; [] without communication."""
        if not ctx.has_table("fct_group_communication"):
            return []
        frame = ctx.df(_SQL, [ctx.run_id])
        if frame.empty:
            return []
        if (frame["counted_from"] == "cpu_calls").all():
            if set(frame["group_kind"]) == {"unknown"}:
                return []
            apply_theme()
            frame["ms"] = frame["dur_ns"].astype(float) / 1e6
            return [self._per_rank(ctx, frame, _group_order(frame["group_kind"]), cpu=True)]
        if set(frame["group_kind"]) == {"unknown"}:
            # One grey bar per rank would say nothing; say why instead.
            raise NothingToShow(
                f"The group of none of this run's {int(frame['kernel_count'].sum()):,} "
                "communication kernels is known: the traces carry no process-group args on "
                "their collectives (Process Group Name/Ranks, written by newer PyTorch "
                "profilers) and no distributedInfo.pg_config, and no topology file was "
                "loaded beside them. Capture with a newer PyTorch, or put the job's "
                "topology.json (`tracehouse topology`) beside the traces and ingest again.")
        apply_theme()
        frame["ms"] = frame["dur_ns"].astype(float) / 1e6
        order = _group_order(frame["group_kind"])
        return [self._per_rank(ctx, frame, order), self._by_phase(ctx, frame, order)]

    def _per_rank(self, ctx: ChartContext, frame: pd.DataFrame,
                  order: list[str], cpu: bool = False) -> RenderedChart:
        ranks = sorted(frame["rank"].unique())
        stages = frame.drop_duplicates("rank")["pp_stage"]
        if len(ranks) <= MAX_ROWS_PER_AXIS:
            table = frame.pivot_table(index="rank", columns="group_kind", values="ms",
                                      aggfunc="sum", fill_value=0.0)
            stage_of = frame.drop_duplicates("rank").set_index("rank")["pp_stage"]
            table.index = [f"rank {r}" + ("" if pd.isna(stage_of[r])
                                          else f" · pp{int(stage_of[r])}") for r in table.index]
            axis, how = "rank", "one bar per rank"
        else:
            per_rank = frame.pivot_table(index=["rank"], columns="group_kind", values="ms",
                                         aggfunc="sum", fill_value=0.0)
            if stages.notna().all():
                stage_of = frame.drop_duplicates("rank").set_index("rank")["pp_stage"]
                keys = [f"stage {int(stage_of[r])}" for r in per_rank.index]
                axis = "pipeline stage"
                how = f"{len(ranks):,} ranks: one bar per pipeline stage, mean per rank"
            else:
                size = 2 ** math.ceil(math.log2(math.ceil(len(ranks) / MAX_ROWS_PER_AXIS)))
                keys = [f"ranks {r // size * size}–{r // size * size + size - 1}"
                        for r in per_rank.index]
                axis = "block of ranks"
                how = (f"{len(ranks):,} ranks: one bar per block of {size} consecutive ranks "
                       "(no pipeline stages known), mean per rank")
            table = per_rank.groupby(keys, sort=False).mean()
        table = table.reindex(columns=[k for k in order if k in table.columns])
        fig, ax = plt.subplots(figsize=(10.5, max(2.6, 0.3 * len(table) + 1.6)))
        left = pd.Series(0.0, index=table.index)
        for kind in table.columns:
            ax.barh(list(range(len(table))), table[kind], left=left, color=group_color(kind),
                    label=plain_text(kind))
            left = left + table[kind]
        ax.set_yticks(list(range(len(table))))
        ax.set_yticklabels([plain_text(i) for i in table.index], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("c10d call time (ms, durations summed over the trace)" if cpu else
                      "communication kernel time (ms, durations summed over the trace)")
        ax.set_ylabel(axis)
        ax.legend(title="group kind", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title(f"Communication by group kind per {axis} — {ctx.run_id}")
        fig.tight_layout()
        totals = frame.groupby("group_kind")["ms"].sum().sort_values(ascending=False)
        whole = float(totals.sum()) or 1.0
        shares = ", ".join(f"{kind} {100 * ms / whole:.0f} %" for kind, ms in totals.items())
        unknown = (" 'unknown': kernels whose group kind the marts could not derive."
                   if "unknown" in totals.index else "")
        source = ("c10d calls (CPU-only run: no kernels) by fct_cpu_collectives.comm_group_kind"
                  if cpu else "communication kernels by fct_kernels.comm_group_kind")
        caption = f"Summed duration of {source}, {how}. Over the run: {shares}.{unknown}"
        return save_figure(fig, ctx, "comm-groups-per-rank",
                           f"Communication time by group kind per {axis}", caption)

    def _by_phase(self, ctx: ChartContext, frame: pd.DataFrame,
                  order: list[str]) -> RenderedChart:
        table = frame.pivot_table(index="group_kind", columns="phase", values="ms",
                                  aggfunc="sum", fill_value=0.0).reindex(order)
        phases = [p for p in PHASE_COLORS if p in table.columns]
        phases += sorted(set(table.columns) - set(phases))
        fig, ax = plt.subplots(figsize=(10.5, max(2.4, 0.42 * len(table) + 1.4)))
        left = pd.Series(0.0, index=table.index)
        for phase in phases:
            ax.barh(list(range(len(table))), table[phase], left=left, color=phase_color(phase),
                    label=plain_text(phase))
            left = left + table[phase]
        ax.set_yticks(list(range(len(table))))
        ax.set_yticklabels([plain_text(i) for i in table.index])
        ax.invert_yaxis()
        ax.set_xlabel("communication kernel time over all ranks (ms, durations summed)")
        ax.set_ylabel("group kind")
        ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.set_title(f"Which phase each group's communication belongs to — {ctx.run_id}")
        fig.tight_layout()
        caption = ("The same communication time split by the Megatron phase of each kernel "
                   "(fct_kernels.phase): tensor-parallel traffic should sit in forward and "
                   "backward, data-parallel in dp_sync, pipeline in pp_p2p; anything else "
                   "is worth a look.")
        return save_figure(fig, ctx, "comm-groups-by-phase",
                           "Communication by group kind and phase", caption)


FAMILY = CommGroupsFamily()
