"""The pipeline-schedule call tree of a Kineto trace, real or simulated.

Why: "does a simulated trace have the structure of a real Megatron run" is
best answered on the frames that define a schedule -- every Python frame of
megatron-core's ``pipeline_parallel/schedules.py`` and
``p2p_communication.py`` (forward/backward steps, their helpers, the P2P
family, grad-sync toggles), in order, with their nesting. One extractor is
used for both sides of the comparison.

Nesting is computed among the selected frames only (filter first, then
stack by time), because in real CPU traces ``gloo:send``/``recv`` slices
outlive their parents and would break a stack over all events.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

#: Frames that make up a schedule's call tree.
SCHEDULE_FRAME = re.compile(
    r"^megatron/core/pipeline_parallel/(schedules|p2p_communication)\.py\(\d+\): ")

Tree = list[tuple[str, "Tree"]]


def load_events(path: Path | str) -> list[dict]:
    """The ``traceEvents`` of a Kineto JSON(.gz) file."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)["traceEvents"]


def schedule_call_tree(events: Iterable[dict] | Path | str,
                       pattern: re.Pattern[str] = SCHEDULE_FRAME) -> Tree:
    """The nested (name, children) tree of schedule frames on the thread that has them.

    ``events`` is a trace's event list or a path to a trace file.
    """
    if isinstance(events, (str, Path)):
        events = load_events(events)
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and pattern.search(e.get("name", "")):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    if not by_thread:
        return []
    frames = max(by_thread.values(), key=len)
    # Integer nanoseconds: float sums of ts + dur would nest a frame that starts
    # exactly where its predecessor ends.
    spans = sorted(((_ns(e["ts"]), _ns(e.get("dur", 0)), e["name"]) for e in frames),
                   key=lambda t: (t[0], -t[1]))
    root: Tree = []
    stack: list[tuple[float, Tree]] = [(float("inf"), root)]
    for ts, dur, name in spans:
        while ts >= stack[-1][0]:
            stack.pop()
        children: Tree = []
        stack[-1][1].append((name, children))
        stack.append((ts + dur, children))
    return root


def _ns(us: float | int | str) -> int:
    return int(round(float(us) * 1000))


def flatten(tree: Tree, depth: int = 0) -> list[str]:
    """Indented lines of a tree (for readable diffs in test failures)."""
    lines = []
    for name, children in tree:
        lines.append("  " * depth + name)
        lines.extend(flatten(children, depth + 1))
    return lines
