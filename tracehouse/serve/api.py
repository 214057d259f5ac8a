"""The JSON API: one path per view, each a function of a read-only cursor and the parameters.

Why a plain table of routes: every endpoint is a GET that runs fixed,
parameter-bound queries on the marts, so the whole surface a client (or a
second user of the machine) can reach is this dictionary; nothing here can
write, and nothing takes SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

from tracehouse.serve.annotations import annotation_tree
from tracehouse.serve.compare import compare
from tracehouse.serve.drill import iteration_ranks, kernel_detail, rank_iteration
from tracehouse.serve.findings import findings
from tracehouse.serve.heatmap import heatmap
from tracehouse.serve.kernels import rank_kernels
from tracehouse.serve.overview import run_list, run_overview
from tracehouse.serve.params import Params
from tracehouse.serve.pipeline import pipeline
from tracehouse.serve.stragglers import stragglers
from tracehouse.serve.timeline import timeline, timeline_choices

View = Callable[[duckdb.DuckDBPyConnection, Params], dict[str, Any]]

ROUTES: dict[str, View] = {
    "/api/runs": run_list,
    "/api/overview": run_overview,
    "/api/heatmap": heatmap,
    "/api/iteration": iteration_ranks,
    "/api/rank_iteration": rank_iteration,
    "/api/kernels": rank_kernels,
    "/api/kernel": kernel_detail,
    "/api/timeline_choices": timeline_choices,
    "/api/timeline": timeline,
    "/api/pipeline": pipeline,
    "/api/annotations": annotation_tree,
    "/api/stragglers": stragglers,
    "/api/compare": compare,
    "/api/findings": findings,
}
