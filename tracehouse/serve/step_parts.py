"""Which columns of ``fct_rank_iterations`` are the step's parts, and what the report calls them.

Why from the YAML: the mart's YAML marks each exclusive part of the step
with ``meta: {step_part: true}`` and the data test ``step_parts_add_up``
sums exactly those; reading the same mark means a part added to the mart
appears in the heatmap without a change here, and a column renamed there
cannot silently disappear (it is listed only when the built table has it).
The labels are the report's (:data:`tracehouse.reports.html.STEP_PARTS`),
so the heatmap and the report's headline name a part the same way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from tracehouse.build.dbt import project_dir
from tracehouse.reports.html import STEP_PARTS

MART = "fct_rank_iterations"
#: The whole step: offered first, beside its parts.
STEP_COLUMN = "step_ns"


@dataclass(frozen=True)
class StepPart:
    """One column the heatmap can show."""

    column: str
    label: str


@functools.lru_cache(maxsize=1)
def step_part_columns(project: Path | None = None) -> tuple[str, ...]:
    """The columns of ``fct_rank_iterations`` its YAML marks ``meta: {step_part: true}``, in order.

    Read from ``models/marts/**/_*__models.yml`` of the dbt project; empty when
    no YAML names the mart (then only the whole step is offered).
    """
    root = (project or project_dir()) / "models" / "marts"
    for path in sorted(root.rglob("_*__models.yml")):
        spec = yaml.safe_load(path.read_text()) or {}
        for model in spec.get("models", []):
            if model.get("name") == MART:
                return tuple(
                    column["name"] for column in model.get("columns", [])
                    if (column.get("meta") or {}).get("step_part")
                    or ((column.get("config") or {}).get("meta") or {}).get("step_part"))
    return ()


def step_parts(timing: str, present: list[str]) -> list[StepPart]:
    """The whole step, then every step part the built mart has, labelled as the report labels
    them for ``timing`` (``gpu`` or ``cpu``); a part the report leaves out for that timing
    source (the optimizer on the GPU) takes the other source's label, else its column name."""
    labels: dict[str, str] = {}
    for source in sorted(STEP_PARTS, key=lambda name: name == timing):  # the run's own last
        labels.update({f"step_{share.removesuffix('_share')}_ns": label
                       for share, label, _note in STEP_PARTS[source]})
    shown = [StepPart(STEP_COLUMN, "step time")] if STEP_COLUMN in present else []
    return shown + [StepPart(column, labels.get(column, column))
                    for column in step_part_columns() if column in present]
