"""A user's own what-if scenario: ``--scale 'rank=6,kind=compute:0.5'`` parsed and selected.

One job: turn the option's text into a selection of replay nodes
(``int_replay_nodes_listed``) and a factor. The selection is SQL over the
warehouse with every value bound as a parameter (kernel names hold
quotes and brackets; rule 12 of STYLE.md), built from fixed fragments
only. Replaying it is :mod:`tracehouse.query.whatif`'s job.

Selectors, all of which a node must meet (an empty selection is an
error, not a no-op); a comma separates selectors, and a part without ``=``
is one more value of the selector before it:

* ``rank=6`` or ``rank=4-7`` or ``rank=0,2`` (``+`` also separates:
  ``rank=0+2``): global ranks;
* ``stage=1``: pipeline stages (int_ranks_placed.pp_stage; a run without
  stages is stage 0), ranges as for ranks;
* ``kind=compute``: the node's kind: ``compute``, ``memory``,
  ``communication`` (GPU ops; on a trace without any, its thread's compute
  pieces and c10d calls), ``cpu`` (runtime calls), or a replay node_kind
  as listed (``gpu_compute``, ``cpu_sync``, ``host_compute``, ...);
* ``phase=backward``: a GPU op's training phase (int_kernels_classified);
* ``name=gemm``: a regular expression found in the GPU op's kernel name
  (case-insensitive; a comma after it belongs to the pattern, so give
  ``name=`` last);
* ``group=dp``: a collective member's process-group kind
  (fct_collectives.process_group_kind) or one of its ``_``-separated
  parts: ``dp`` selects ``dp`` and ``dp_cp``, ``tp`` selects ``tp``.

The factor follows the last ``:`` and multiplies the selected nodes'
durations (a kernel's or call's work, a collective member's transfer after
the last arrival: tracehouse.core.replay_scenarios).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: node_kind values a ``kind=`` shorthand stands for.
#: (A trace without GPU ops has its thread's compute pieces and c10d calls,
#: int_replay_host_ops_listed: compute and communication take them in too.)
KIND_SHORTHANDS = {
    "compute": ("gpu_compute", "host_compute"),
    "memory": ("gpu_memory",),
    "communication": ("gpu_communication", "host_communication"),
    "cpu": ("cpu_call", "cpu_sync"),
}
NODE_KINDS = ("cpu_call", "cpu_sync", "gpu_compute", "gpu_memory", "gpu_communication",
              "host_compute", "host_communication")
SELECTORS = ("rank", "stage", "kind", "phase", "name", "group")


@dataclass(frozen=True)
class Scale:
    """One ``--scale``: selector -> values, and the factor for the nodes selected."""

    text: str
    selectors: dict[str, tuple[str, ...]]
    factor: float


def _integers(selector: str, text: str) -> tuple[str, ...]:
    """``4-7+9`` (or ``4-7,9`` when the whole option has one selector) -> ('4', ..., '9')."""
    values: list[int] = []
    for part in text.replace("+", ",").split(","):
        first, _, last = part.strip().partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            raise ValueError(f"{selector}={text!r}: not a number or range (e.g. 4-7)") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"{selector}={text!r}: not a range (e.g. 4-7)")
        values.extend(range(lo, hi + 1))
    return tuple(str(value) for value in sorted(set(values)))


def parse_scale(text: str) -> Scale:
    """``'rank=6,kind=compute:0.5'`` -> Scale; ValueError naming the mistake."""
    selection, colon, factor_text = text.rpartition(":")
    if not colon or not selection.strip():
        raise ValueError(f"{text!r}: give SELECTORS:FACTOR, e.g. 'rank=6,kind=compute:0.5'")
    try:
        factor = float(factor_text)
    except ValueError:
        raise ValueError(f"{text!r}: the factor after ':' must be a number, "
                         f"not {factor_text!r}") from None
    if not factor >= 0:
        raise ValueError(f"{text!r}: the factor must be >= 0")
    selectors: dict[str, list[str]] = {}
    current: str | None = None
    for part in selection.split(","):
        key, equals, value = part.partition("=")
        key = key.strip().lower()
        if equals and key in SELECTORS:
            current = key
        elif equals:
            raise ValueError(f"{text!r}: unknown selector {key!r} "
                             f"(one of {', '.join(SELECTORS)})")
        elif current == "name":  # a comma inside the pattern
            selectors["name"][-1] += "," + part
            continue
        elif current is not None:  # rank=0,2 or kind=compute,memory: one more value
            value = part
        else:
            raise ValueError(f"{text!r}: {part!r} is not SELECTOR=VALUE")
        if not value.strip():
            raise ValueError(f"{text!r}: {current}= has no value")
        selectors.setdefault(current, []).append(value.strip())
    parsed: dict[str, tuple[str, ...]] = {}
    for key, values in selectors.items():
        if key in ("rank", "stage"):
            parsed[key] = _integers(key, ",".join(values))
        elif key == "kind":
            kinds: list[str] = []
            for value in values:
                lowered = value.lower()
                if lowered in KIND_SHORTHANDS:
                    kinds.extend(KIND_SHORTHANDS[lowered])
                elif lowered in NODE_KINDS:
                    kinds.append(lowered)
                else:
                    raise ValueError(f"{text!r}: kind={value!r} is none of "
                                     f"{', '.join([*KIND_SHORTHANDS, *NODE_KINDS])}")
            parsed[key] = tuple(kinds)
        else:
            if key == "name":
                for value in values:
                    try:
                        re.compile(value)
                    except re.error as error:
                        raise ValueError(f"{text!r}: name={value!r} is not a regular "
                                         f"expression ({error})") from None
            parsed[key] = tuple(values)
    return Scale(text=text, selectors=parsed, factor=factor)


#: One condition per selector, each with one ``?`` per value.
_CONDITIONS = {
    "rank": "nodes.rank in ({marks})",
    "stage": "coalesce(placed.pp_stage, 0) in ({marks})",
    "kind": "nodes.node_kind in ({marks})",
    "phase": "kernels.phase in ({marks})",
    "name": "({alternatives})",
    "group": "({groups})",
}


def selection_sql(scale: Scale) -> tuple[str, list[object]]:
    """(SQL, parameters) listing the node_id of every replay node of run ``?``
    (the first parameter) that ``scale`` selects."""
    conditions, parameters = ["nodes.run_id = ?"], []
    for key, values in scale.selectors.items():
        marks = ", ".join("?" for _ in values)
        alternatives = " or ".join(
            "regexp_matches(kernels.name, ?, 'i')" for _ in values)
        groups = " or ".join(
            "list_contains(string_split(members.process_group_kind, '_'), ?)" for _ in values)
        conditions.append(_CONDITIONS[key].format(marks=marks, alternatives=alternatives,
                                                  groups=groups))
        parameters.extend(int(value) if key in ("rank", "stage") else value for value in values)
    sql = (
        "select nodes.node_id "
        "from intermediate.int_replay_nodes_listed as nodes "
        "left join intermediate.int_ranks_placed as placed "
        "on nodes.run_id = placed.run_id and nodes.rank = placed.rank "
        "left join intermediate.int_kernels_classified as kernels "
        "on nodes.trace_id = kernels.trace_id and nodes.slice_id = kernels.slice_id "
        "and nodes.node_kind like 'gpu_%' "
        "left join intermediate.int_collective_members_aligned as members "
        "on nodes.trace_id = members.trace_id and nodes.slice_id = members.slice_id "
        "and nodes.node_kind in ('gpu_communication', 'host_communication') "
        "where " + " and ".join(conditions)
    )
    return sql, parameters
