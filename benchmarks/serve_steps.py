#!/usr/bin/env python3
"""The viewer's timeline in process: CPU ms per view and per step, on a built warehouse.

Why beside ``benchmarks/serve.py``: that one times the viewer over HTTP as
a user meets it, and on a shared 2-core machine its wall figures move 2-7x
with the load. Process CPU time (DuckDB's worker threads included) of the
same views, called as the server calls them, moves much less, and split by
step it says where a view's time goes: the selection's cache fill, the
lanes, the per-pixel query, the busy cells, the CPU-step lanes, the
collective chains, the rectangles' columns, the JSON encoding.

Each step is timed exclusive of the steps it calls (a stack of timers
around the timeline module's functions, patched in by name: a function a
version of the viewer lacks is skipped, so the same script times main's
viewer put first on ``PYTHONPATH``).

    python benchmarks/serve_steps.py --warehouse DIR [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The timeline module's steps timed, by the name of the function that does each.
STEPS = ("view_window", "_cached", "_lanes", "_columns", "busy_cells", "_cpu_frames",
         "_links", "_rectangles", "_head", "_rank_labels", "bucket_width",
         "longest_per_cell", "_winners", "_texts", "_remember", "encode")


@dataclass
class ViewTiming:
    """One view, ``repeat`` times: process CPU ms and wall ms, and CPU ms per step."""

    name: str
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    answer_kb: float = 0.0

    def row(self) -> str:
        # A step some repeats skip (the string memo's first fill) counts 0 in those.
        padded = {name: values + [0.0] * (len(self.cpu_ms) - len(values))
                  for name, values in self.steps.items()}
        steps = ", ".join(f"{name.strip('_')} {statistics.median(values):.0f}"
                          + (f" (max {max(values):.0f})"
                             if max(values) > 2 * statistics.median(values) + 5 else "")
                          for name, values in sorted(padded.items(),
                                                     key=lambda item: -max(item[1]))
                          if max(values) >= 1)
        return (f"| {self.name} | {statistics.median(self.cpu_ms):.0f} | "
                f"{max(self.cpu_ms):.0f} | {statistics.median(self.wall_ms):.0f} | "
                f"{self.answer_kb:,.0f} | {steps} |")


class StepClock:
    """Exclusive CPU ms per step: a step's time less the time of the steps it called."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        frame = [time.process_time(), 0.0]  # start, children's time
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.process_time() - frame[0]
            self.totals[name] += (spent - frame[1]) * 1e3
            if self._stack:
                self._stack[-1][1] += spent

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.step(name):
                return function(*args, **kwargs)
        return timed


def patch_steps(clock: StepClock) -> None:
    """Put the clock around each of :data:`STEPS` the timeline module (and its helpers) has."""
    import tracehouse.serve.timeline as timeline

    modules = [timeline]
    for extra in ("tracehouse.serve.pixels", "tracehouse.serve.busy"):
        try:
            modules.append(__import__(extra, fromlist=["_"]))
        except ImportError:
            pass
    for module in modules:
        for name in STEPS:
            function = getattr(module, name, None)
            if callable(function) and not getattr(function, "_timed", False):
                wrapped = clock.wrap(name, function)
                wrapped._timed = True  # type: ignore[attr-defined]
                setattr(module, name, wrapped)


def encoder() -> Callable[[Any], bytes]:
    """The server's JSON encoding of an answer, whichever version of it is on the path."""
    from tracehouse.serve import server

    return lambda payload: server._json(payload)[0]


def selections(warehouse: Path) -> tuple[str, dict[str, Any], list[tuple[str, dict[str, str]]]]:
    """The run, its second iteration's window and the three selections serve.py times."""
    from tracehouse.serve.marts import MartReader
    from tracehouse.serve.params import Params
    from tracehouse.serve.timeline import timeline_choices

    reader = MartReader(warehouse)
    try:
        with reader.cursor() as cur:
            run = cur.execute("select run_id from fct_run_summary order by ranks desc "
                              "limit 1").fetchone()[0]
            choices = timeline_choices(cur, Params({"run": [run]}))
    finally:
        reader.close()
    iterations = choices["iterations"]
    iteration = iterations[min(1, len(iterations) - 1)]
    ranks = choices["ranks"]
    chosen = [("pp group", {"group": "pp", "index": "0"}),
              ("replica", {"group": "replica", "index": "0"}),
              (f"all {len(ranks)} ranks", {"ranks": f"{min(ranks)}-{max(ranks)}"})]
    return run, iteration, [(label, selection) for label, selection in chosen
                            if "group" not in selection
                            or selection["group"] in choices["groups"]]


def windows(iteration: dict[str, Any]) -> list[tuple[str, int, int]]:
    """serve.py's interactions on one selection: the iteration, zooms, a pan."""
    start, end = int(iteration["start"]), int(iteration["end"])
    span, middle = end - start, start + (end - start) // 2
    found = [("first view", start, end), ("the iteration again", start, end)]
    found += [(f"zoom 1/{zoom}", middle - span // zoom // 2, middle + span // zoom // 2)
              for zoom in (4, 16, 64)]
    width = span // 16
    found.append(("pan (1/16, 10% step)", middle + width // 10, middle + width // 10 + width))
    return found


def measure(warehouse: Path, repeat: int, only: str | None) -> list[ViewTiming]:
    """Every selection's views ``repeat`` times, in serve.py's order (a PP group, a replica,
    every rank; each selection's first view, then the iteration again, zooms, a pan), each
    repeat on a fresh reader (no selection cached, nothing of the database read yet), as a
    server started for it meets them."""
    from tracehouse.serve.marts import MartReader
    from tracehouse.serve.params import Params

    clock = StepClock()
    patch_steps(clock)
    import tracehouse.serve.timeline as timeline_module

    encode = encoder()
    run, iteration, chosen = selections(warehouse)
    chosen = [(label, selection) for label, selection in chosen if not only or only in label]
    views = {(label, name): ViewTiming(f"{label}: {name}")
             for label, _ in chosen for name, *_ in windows(iteration)}
    for _ in range(repeat):
        reader = MartReader(warehouse)
        try:
            for label, selection in chosen:
                for name, start, end in windows(iteration):
                    params = Params({"run": [run], "start": [str(start)], "end": [str(end)],
                                     "px": ["1200"], **{k: [v] for k, v in selection.items()}})
                    clock.totals.clear()
                    cpu, wall = time.process_time(), time.perf_counter()
                    with reader.cursor() as cur:
                        answer = timeline_module.timeline(cur, params)
                    with clock.step("encode"):
                        body = encode(answer)
                    view = views[(label, name)]
                    view.cpu_ms.append((time.process_time() - cpu) * 1e3)
                    view.wall_ms.append((time.perf_counter() - wall) * 1e3)
                    view.answer_kb = len(body) / 1024
                    for step, spent in clock.totals.items():
                        view.steps[step].append(spent)
        finally:
            reader.close()
    for view in views.values():
        print(view.row(), file=sys.stderr, flush=True)
    return list(views.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="time only the selections whose label has this text")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    timings = measure(args.warehouse.resolve(), args.repeat, args.only)
    print("| view | CPU ms (median) | CPU ms (max) | wall ms (median) | answer KiB | "
          "CPU ms per step (median, exclusive) |")
    print("|---|---|---|---|---|---|")
    for timing in timings:
        print(timing.row())
    slow = [t.name for t in timings if statistics.median(t.cpu_ms) >= 200]
    print(f"\nover 200 CPU ms (median): {', '.join(slow) if slow else 'none'}")
    print(f"load {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps([asdict(t) for t in timings], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
