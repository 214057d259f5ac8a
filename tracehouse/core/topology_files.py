"""The topology file formats: the contract's topology JSON and Megatron-TraceViz's text.

Why here, in the core: ``tracehouse topology`` writes them, ingest's tests
read them back, and the Megatron patch (``megatron_patch/topology_dump.py``)
dumps them from a running job. Dependencies point one way: the patch imports
the core, never the reverse.
"""

from __future__ import annotations

import datetime as dt
import json

__all__ = ["format_traceviz_txt", "topology_json"]


def topology_json(topology: dict) -> str:
    """The topology as JSON text: one line per group kind, readable and diffable."""
    lines = ["{"]
    items = list(topology.items())
    for index, (key, value) in enumerate(items):
        comma = "," if index < len(items) - 1 else ""
        if isinstance(value, dict) and key in ("groups", "ranks", "process_groups"):
            inner = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            body = ",\n".join(inner)
            lines.append(f"  {json.dumps(key)}: {{\n{body}\n  }}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


_TXT_SECTIONS = (
    ("tp", "TENSOR PARALLEL (TP) GROUPS"),
    ("pp", "PIPELINE PARALLEL (PP) GROUPS"),
    ("dp", "DATA PARALLEL (DP) GROUPS"),
    ("cp", "CONTEXT PARALLEL (CP) GROUPS"),
    ("ep", "EXPERT PARALLEL (EP) GROUPS"),
)


def format_traceviz_txt(topology: dict, timestamp: dt.datetime | None = None) -> str:
    """Megatron-TraceViz's ``unique_parallel_groups_*.txt`` for this topology.

    Same sections and line shapes as the original (its aggregator parses
    ``Group N: [ranks]`` lines and ``X Size: N`` headers), plus a CP section
    and correct replicas for every order and for CP with EP.
    """
    sizes = topology["sizes"]
    when = (timestamp or dt.datetime.now()).isoformat(sep=" ")
    rule, thin = "=" * 80, "-" * 50
    out = [rule, "MEGATRON PARALLEL CONFIGURATION", rule, f"Timestamp: {when}"]
    for label, key in (("TP", "tp"), ("PP", "pp"), ("CP", "cp"), ("EP", "ep"), ("ETP", "etp"),
                       ("VPP", "vpp"), ("DP", "dp")):
        out.append(f"{label} Size: {sizes[key]}")
    out += [f"World Size: {sizes['world']}", f"Order: {topology['order']}", ""]
    out += ["STATISTICS", thin, f"Total Ranks: {sizes['world']}",
            f"Valid Ranks: {sizes['world']}", "Error Ranks: 0", ""]
    for kind, title in _TXT_SECTIONS:
        groups = topology["groups"].get(kind, [])
        if kind in ("cp", "ep") and sizes[kind] == 1:
            continue
        out += [title, thin]
        out += [f"Group {i}: {json.dumps(g)}"
                for i, g in enumerate(groups, start=1)]
        out += [f"Total groups: {len(groups)}", ""]
    replicas = topology["groups"]["model_replica"]
    out += ["FULL MODEL RANK GROUPS (by DP Rank)", thin,
            "Each DP rank contains ONE complete model replica with ALL shards.",
            f"Full model = TP{sizes['tp']} x CP{sizes['cp']} x PP{sizes['pp']} = "
            f"{len(replicas[0])} ranks", thin]
    out += [f"Group {i}: {json.dumps(g)}"
            for i, g in enumerate(replicas)]
    out += ["", f"Total model replicas (DP): {len(replicas)}", ""]
    return "\n".join(out)
