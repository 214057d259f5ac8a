"""fct_annotation_ranges and the kernel -> range map on a real Kineto trace.

The shared A100 trace (``single_rank/a100_nccl_pg_args.json.gz``: 42 user
annotations, ``ProfilerStep#4..6`` among them, 2,700 kernels) is ingested
with a few annotation names made hostile (quotes, ``<script>``, `` > ``
inside a name), and the mart is checked against a computation of its own
from the raw JSON: on each CPU thread a range's ancestors are the
annotations that contain it, and a range's kernels are those whose launch
call (the ``cuda_runtime`` event with the kernel's correlation id) lies
inside it on its thread. Nothing of the SQL is reused. The Nsight side
(NVTX ranges, the kernel map against SQLite and nsys-ai) is
tests/test_nsys_views.py's.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_DATA, query_warehouse
from tracehouse.build.dbt import EXIT_OK, run_dbt
from tracehouse.ingest.runner import ingest_paths

TRACE = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"
RUN = "annotations"
#: Names given to some user annotations (and their GPU copies), as a trace may hold them.
HOSTILE = {
    "## forward ##": "fwd \"quoted\" 'single' <script>alert(1)</script>",
    "## backward ##": "bwd > not a child",
    "DistributedDataParallel.forward": "ddp <b>&amp; > x",
}
#: Kineto's launch tolerance: JSON times are µs with three decimals, the lake's ns.
NS = 2

pytestmark = pytest.mark.skipif(not TRACE.exists(), reason=f"shared trace missing: {TRACE}")


def _events(path: Path) -> dict[str, Any]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("cat") in ("user_annotation", "gpu_user_annotation"):
            event["name"] = HOSTILE.get(event["name"], event["name"])
    return trace


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The trace with hostile names, ingested and built (marts and their data tests)."""
    root = tmp_path_factory.mktemp("annotations")
    trace = _events(TRACE)
    source = root / "traces" / "rank0.pt.trace.json.gz"
    source.parent.mkdir()
    source.write_bytes(gzip.compress(json.dumps(trace).encode()))
    warehouse = root / "warehouse"
    result = ingest_paths([source], warehouse=warehouse, run=RUN, progress=False)
    assert not result.failed, result.failed
    assert run_dbt(["build"], warehouse) == EXIT_OK
    yield warehouse, trace


def _oracle(trace: dict[str, Any]) -> list[tuple]:
    """(path, depth, parent's path, kernel_count, own_kernel_count, gpu_span_us) per
    range, from the JSON alone: containment on the range's (pid, tid) thread."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    # Outermost first at equal starts: the longer one holds the shorter.
    ranges.sort(key=lambda e: (e["ts"], -e["dur"]))
    order = {id(e): i for i, e in enumerate(ranges)}

    def inside(inner: dict, outer: dict) -> bool:
        return (inner["pid"], inner["tid"]) == (outer["pid"], outer["tid"]) and (
            outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])

    ancestors = {id(r): [a for a in ranges if a is not r and inside(r, a)
                         and order[id(a)] < order[id(r)]] for r in ranges}

    def path(r: dict) -> str:
        return " > ".join([a["name"] for a in ancestors[id(r)]] + [r["name"]])

    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels = [(k, launches[k["args"]["correlation"]]) for k in events
               if k.get("cat") == "kernel" and k["args"].get("correlation") in launches]
    out = []
    for r in ranges:
        mine = [(k, launch) for k, launch in kernels if inside(launch, r)]
        own = [1 for _k, launch in mine
               if not any(inside(launch, d) for d in ranges if r in ancestors[id(d)])]
        span = (max(k["ts"] + k["dur"] for k, _ in mine) - min(k["ts"] for k, _ in mine)
                if mine else None)
        parent = path(ancestors[id(r)][-1]) if ancestors[id(r)] else None
        out.append((path(r), len(ancestors[id(r)]), parent, len(mine), len(own), span))
    return out


def test_user_annotations_fill_the_tree_as_the_json_nests_them(annotated) -> None:
    warehouse, trace = annotated
    rows = query_warehouse(warehouse, """
        select
            ranges.annotation_path, ranges.annotation_depth, parents.annotation_path,
            ranges.kernel_count, ranges.own_kernel_count, ranges.gpu_span_ns
        from fct_annotation_ranges as ranges
        left join fct_annotation_ranges as parents
            on ranges.trace_id = parents.trace_id
            and ranges.parent_range_id = parents.slice_id
        where ranges.run_id = ?""", [RUN])
    expected = _oracle(trace)
    assert len(rows) == len(expected) == 42
    key = lambda row: row[:5]  # noqa: E731
    assert Counter(map(key, rows)) == Counter(map(key, expected))
    # GPU projection: the same spans to the lake's ns (the JSON has µs, 3 decimals),
    # compared per key in order (a path repeats: one range per call).
    ours: dict[tuple, list] = {}
    theirs: dict[tuple, list] = {}
    for row in rows:
        ours.setdefault(key(row), []).append(row[5])
    for row in expected:
        theirs.setdefault(key(row), []).append(None if row[5] is None else row[5] * 1000)
    for path, spans in theirs.items():
        mine = ours[path]
        if spans[0] is None:
            assert mine == spans, path
            continue
        assert all(abs(a - b) <= NS for a, b in zip(sorted(mine), sorted(spans))), path
    assert sum(row[3] > 0 for row in expected) > 30
    assert max(row[1] for row in expected) >= 2  # a real tree, not a flat list


def test_hostile_names_survive_and_gpu_copies_are_not_ranges(annotated) -> None:
    warehouse, trace = annotated
    names = {name for (name,) in query_warehouse(
        warehouse, "select distinct name from fct_annotation_ranges where run_id = ?", [RUN])}
    assert set(HOSTILE.values()) <= names
    # Only the CPU ranges: the GPU copies (gpu_user_annotation) are projections.
    (kinds,) = query_warehouse(warehouse, """
        select list(distinct annotation_kind) from fct_annotation_ranges where run_id = ?""",
                               [RUN])
    assert kinds == (["user_annotation"],)
    cpu = sum(e.get("cat") == "user_annotation" for e in trace["traceEvents"])
    [(count,)] = query_warehouse(
        warehouse, "select count(*) from fct_annotation_ranges where run_id = ?", [RUN])
    assert count == cpu
    # ' > ' inside a name: the path splits wrongly, the parent link does not.
    [(path, parent_name)] = query_warehouse(warehouse, """
        select child.annotation_path, parent.name
        from fct_annotation_ranges as child
        inner join fct_annotation_ranges as parent
            on child.trace_id = parent.trace_id and child.parent_range_id = parent.slice_id
        where child.run_id = ? and child.name = ?
        limit 1""", [RUN, HOSTILE["DistributedDataParallel.forward"]])
    assert path.endswith(" > " + HOSTILE["DistributedDataParallel.forward"])
    assert parent_name == HOSTILE["## forward ##"]


def test_kernels_map_to_their_innermost_range(annotated) -> None:
    warehouse, trace = annotated
    rows = query_warehouse(warehouse, """
        select kernels.correlation, ranges.name
        from fct_kernels as kernels
        left join fct_annotation_ranges as ranges
            on kernels.trace_id = ranges.trace_id
            and kernels.annotation_slice_id = ranges.slice_id
        where kernels.run_id = ? and kernels.category = 'kernel'""", [RUN])
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    expected = {}
    for launch in launches.values():
        enclosing = [r for r in ranges if (r["pid"], r["tid"]) == (launch["pid"], launch["tid"])
                     and r["ts"] <= launch["ts"]
                     and launch["ts"] + launch["dur"] <= r["ts"] + r["dur"]]
        if enclosing:
            expected[launch["args"]["correlation"]] = max(
                enclosing, key=lambda r: (r["ts"], -r["dur"]))["name"]
    ours = {corr: name for corr, name, *_ in rows if name is not None}
    assert ours == {c: n for c, n in expected.items() if c in {row[0] for row in rows}}
    assert len(ours) > 500  # 939 of the 2,700 kernels are launched inside a range
