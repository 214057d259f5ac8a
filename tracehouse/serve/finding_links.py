"""Where a finding's evidence is on screen: the viewer's view named by the rule's ``shown_in``.

Why on the server: the seed ``finding_rules`` says, in ``shown_in``
(``report: …; serve: <view>``), which view shows a rule's evidence, and
``fct_findings`` says for which keys (``evidence_rank``,
``evidence_pp_group_index``, the iteration). Joining the two into a view
and its parameters here keeps the page a renderer: it draws the link it
is given and never decides what a finding means. A view the viewer does
not have (the report's roofline, ``serve: efficiency``) gets no link; the
page then shows ``shown_in`` as text, so the reader still knows where to
look.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tracehouse.serve.cells import iteration_label
from tracehouse.serve.params import WHOLE_TRACE

#: The viewer's views a finding may open (the page's route names).
VIEWS = ("stragglers", "pipeline", "timeline")


def serve_view(shown_in: str | None) -> str | None:
    """The viewer's part of ``shown_in`` (``report: stragglers; serve: stragglers``)."""
    for part in (shown_in or "").split(";"):
        where, _, view = part.partition(":")
        if where.strip() == "serve":
            return view.strip() or None
    return None


def finding_link(record: Mapping[str, Any], run_id: str, iteration: int | None,
                 windows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The view, its parameters and a label for one finding, or None when the viewer lacks it.

    ``iteration`` is the one the finding's evidence comes from (the iteration
    asked for, or the run's worst); ``windows`` are the run's iterations on
    the timeline's axis (:func:`tracehouse.serve.timeline.iteration_windows`).
    """
    view = serve_view(record.get("shown_in"))
    key = WHOLE_TRACE if iteration is None else iteration
    where = f"iteration {iteration_label(iteration)}"
    if view == "stragglers":
        return {"view": view, "params": {"run": run_id, "iteration": key},
                "text": f"who waited for whom · {where}"}
    if view == "pipeline":
        group = record.get("evidence_pp_group_index")
        params: dict[str, Any] = {"run": run_id, "iteration": key}
        if group is not None:
            params["group"] = group
        label = "pipeline" + ("" if group is None else f" · pp group {group}")
        return {"view": view, "params": params, "text": f"{label} · {where}"}
    if view == "timeline":
        rank = record.get("evidence_rank")
        params = {"run": run_id}
        if rank is not None:
            params["ranks"] = str(rank)
        window = next((w for w in windows if w["key"] == key), None)
        if window is not None:
            params.update(start=window["start"], end=window["end"])
        label = "timeline" + ("" if rank is None else f" · rank {rank}")
        return {"view": view, "params": params, "text": f"{label} · {where}"}
    return None
