"""Property: any mutation of a real trace ingests cleanly or fails cleanly (issue 2, acceptance 4).

Hypothesis mutates a real dlrm trace (truncation, wrong types, missing keys,
duplicated events, hostile strings, out-of-range numbers, corrupt bytes) and
ingests it into a fresh warehouse. Every outcome must be one of:

* a clean load: exit 0, every slice event of the file is a slice, flows point
  at slices of the trace, names round-trip exactly, no error row; or
* a clean per-file error: exit 1, one line naming the file, exactly one
  ``ingest_errors`` row and no row in any other table;

never an exception, a hang (per-example deadline), a temporary left behind,
or an ``internal`` error (an unexpected exception the runner had to catch:
that is a parser bug, not a clean error).
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA
from tracehouse.ingest.runner import ingest_paths
from tracehouse.ingest.schema import LAKE_TABLES, TRACE_TABLES

KINETO = SHARED_DATA / "kineto"
BASE_TRACE = KINETO / "dlrm_8rank" / "worker0_step_12.1694128201545.pt.trace.json.gz"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not BASE_TRACE.is_file(), reason=f"shared Kineto trace {BASE_TRACE} not found"
)]

SLICE_PHASES = {"X", "i", "I"}
FLOW_PHASES = {"s", "f"}


@cache
def _base() -> dict[str, Any]:
    """The real trace (~3.3k events: X, s/f flows, M metadata, instants). Never mutated."""
    return json.loads(gzip.decompress(BASE_TRACE.read_bytes()))


# --------------------------------------------------------------------------- strategies

HOSTILE = [
    "",
    '"',
    "'",
    "\\",
    '\\"',
    "<script>alert(1)</script>",
    "\x00",
    "a\x00b",
    "😀🔥👩‍👩‍👧",
    "\u202e\u200b",
    "Robert'); drop table slices;--",
    '{"not": "args"}',
    "\n\r\t",
    "%s%n%x",
    "${jndi:ldap://x}",
    "ProfilerStep#",
    "x" * 100_000,
    "é" * 5_000,
]
#: Strings that are not Unicode scalar values: never a valid load.
LONE_SURROGATES = ["\ud800", "a\udfffb", "\udc00\ud800"]
BIG_NUMBERS = [
    2**63 - 1,
    2**63,
    2**64,
    10**20,
    -(2**63),
    -(2**63) - 1,
    -1,
    0,
    2**53 + 1,
    1e300,
    -1e300,
    1e-300,
    1.5,
    float("nan"),
    float("inf"),
    -float("inf"),
]

wrong_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(-5, 5), max_size=3),
)
hostile_strings = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))
numbers = st.one_of(st.sampled_from(BIG_NUMBERS), st.integers(-(2**66), 2**66))

EVENT_KEYS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args"]
ARGS_KEYS = [
    "External id",
    "correlation",
    "device",
    "stream",
    "Collective name",
    "Process Group Name",
    "Process Group Ranks",
    "Group size",
    "In msg nelems",
    "dtype",
    "name",
    "labels",
    "sort_index",
    "Input Dims",
    "hostile key",
]
TOP_KEYS = [
    "traceEvents",
    "distributedInfo",
    "baseTimeNanoseconds",
    "schemaVersion",
    "deviceProperties",
    "trace_id",
    "host_name",
]
DIST_KEYS = ["rank", "world_size", "backend", "pg_config"]


@dataclass
class Case:
    """One mutated trace and what is known about it."""

    data: bytes = field(repr=False)
    name: str
    steps: list[str] = field(default_factory=list)
    must_load: bool = True  # only mutations that keep a valid Kineto trace


def _event(draw: st.DrawFn, events: list[Any]) -> int:
    """Index of an event, biased to the interesting phases."""
    phase = draw(st.sampled_from(["X", "X", "s", "f", "M", "i", None]))
    candidates = [
        i
        for i, ev in enumerate(events)
        if phase is None or (isinstance(ev, dict) and ev.get("ph") == phase)
    ]
    candidates = candidates or list(range(len(events)))
    return candidates[draw(st.integers(0, len(candidates) - 1))]


def _own(events: list[Any], index: int) -> dict[str, Any] | None:
    """Replace ``events[index]`` by a deep copy we may mutate (None if not an object)."""
    if not isinstance(events[index], dict):
        return None
    events[index] = copy.deepcopy(events[index])
    return events[index]


def _mutate(draw: st.DrawFn, doc: dict[str, Any], events: list[Any], case: Case) -> None:
    kind = draw(
        st.sampled_from(
            [
                "wrong_type",
                "delete_key",
                "duplicate",
                "duplicate",
                "hostile",
                "hostile",
                "hostile",
                "number",
                "number",
                "args_not_object",
                "event_not_object",
                "top_level",
                "distributed",
            ]
        )
    )
    if kind == "duplicate":
        index = _event(draw, events)
        times = draw(st.integers(1, 3))
        where = draw(st.sampled_from(["after", "end"]))
        copies = [copy.deepcopy(events[index]) for _ in range(times)]
        if where == "end":
            events.extend(copies)
        else:
            events[index + 1 : index + 1] = copies
        case.steps.append(f"duplicate event {index} x{times} ({where})")
        return
    if kind == "top_level":
        key = draw(st.sampled_from(TOP_KEYS))
        if draw(st.booleans()):
            doc.pop(key, None)
            case.steps.append(f"delete top-level {key}")
        else:
            doc[key] = draw(st.one_of(wrong_values, numbers))
            case.steps.append(f"top-level {key} = {doc[key]!r:.80}")
        case.must_load = False
        return
    if kind == "distributed":
        dist = doc["distributedInfo"] = copy.deepcopy(doc.get("distributedInfo") or {})
        if not isinstance(dist, dict):
            return
        key = draw(st.sampled_from(DIST_KEYS))
        if draw(st.booleans()):
            dist.pop(key, None)
            case.steps.append(f"delete distributedInfo.{key}")
        else:
            dist[key] = draw(st.one_of(wrong_values, numbers, hostile_strings))
            case.steps.append(f"distributedInfo.{key} = {dist[key]!r:.80}")
        case.must_load = False
        return

    index = _event(draw, events)
    if kind == "event_not_object":
        events[index] = draw(wrong_values)
        case.steps.append(f"event {index} = {events[index]!r:.80}")
        case.must_load = False
        return
    ev = _own(events, index)
    if ev is None:
        return
    if kind == "wrong_type":
        key = draw(st.sampled_from(EVENT_KEYS))
        ev[key] = draw(wrong_values)
        case.steps.append(f"event {index}.{key} = {ev[key]!r:.80}")
        case.must_load = False
    elif kind == "delete_key":
        key = draw(st.sampled_from(EVENT_KEYS))
        ev.pop(key, None)
        case.steps.append(f"delete event {index}.{key}")
        case.must_load = False
    elif kind == "args_not_object":
        ev["args"] = draw(
            st.one_of(
                st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
            )
        )
        case.steps.append(f"event {index}.args = {ev['args']!r:.80}")
        case.must_load = False
    elif kind == "hostile":
        value = draw(st.one_of(hostile_strings, st.sampled_from(LONE_SURROGATES)))
        if value in LONE_SURROGATES:
            case.must_load = False
        where = draw(st.sampled_from(["name", "cat", "tid", "args value", "args key"]))
        if where in ("name", "cat", "tid"):
            ev[where] = value
        else:
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            ev["args"] = args
            if where == "args key":
                args[value] = value
            else:
                args[draw(st.sampled_from(["name", "Collective name", "dtype", "hostile"]))] = value
        case.steps.append(f"event {index} {where} = {value!r:.80}")
    elif kind == "number":
        key = draw(st.sampled_from(["ts", "dur", "pid", "tid", "id", "args", "name"]))
        value = draw(numbers)
        if key == "args":
            arg = draw(st.sampled_from(ARGS_KEYS))
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            ev["args"] = {**args, arg: value}
            key = f"args.{arg}"
        elif key == "name":
            value = f"ProfilerStep#{draw(st.integers(0, 10**30))}"
            ev["name"] = value
        else:
            ev[key] = value
        case.steps.append(f"event {index}.{key} = {value!r:.80}")
        case.must_load = False


@st.composite
def mutated_traces(draw: st.DrawFn) -> Case:
    base = _base()
    doc = dict(base)
    events = list(base["traceEvents"])
    doc["traceEvents"] = events
    case = Case(b"", "")
    for _ in range(draw(st.integers(1, 3))):
        if isinstance(doc.get("traceEvents"), list) and doc["traceEvents"]:
            events = doc["traceEvents"]
            _mutate(draw, doc, events, case)

    ensure_ascii = draw(st.booleans())
    text = json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    compressed = draw(st.booleans())
    data = gzip.compress(text, compresslevel=1) if compressed else text
    byte_level = draw(st.sampled_from(["none"] * 4 + ["truncate", "corrupt"]))
    if byte_level == "truncate":
        cut = draw(st.integers(0, len(data) - 1))
        case.steps.append(f"truncate at byte {cut} of {len(data)}")
        data = data[:cut]
        case.must_load = False
    elif byte_level == "corrupt":
        at = draw(st.integers(0, len(data) - 1))
        byte = draw(st.binary(min_size=1, max_size=1))
        data = data[:at] + byte + data[at + 1 :]
        case.steps.append(f"byte {at} = {byte!r}")
        case.must_load = False
    case.data = data
    gz = ".gz" if compressed else ""
    stem = draw(st.sampled_from(["rank-0", "trace"]))  # with and without a rank in the name
    if stem == "trace":
        case.must_load = case.must_load and "distributedInfo" in doc
    case.name = f"{stem}.json{gz}"
    return case


# --------------------------------------------------------------------------- oracle


def _python_view(data: bytes) -> dict[str, Any] | None:
    """The file as Python's json reads it, or None where it is not a JSON object.

    Invalid UTF-8 is replaced (U+FFFD) first: the parser only decodes what it
    keeps, so a bad byte in a key or value it ignores (``traceName``, an
    unknown event key) is not an error, and nothing of it reaches the lake.
    """
    try:
        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        doc = json.loads(text.decode("utf-8", "replace"))
    except (OSError, EOFError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _lake(con: duckdb.DuckDBPyConnection, warehouse: Path) -> None:
    for table in LAKE_TABLES:
        glob = str(warehouse / "lake" / table / "**" / "*.parquet").replace("'", "''")
        con.execute(
            f"create view {table} as select * from read_parquet('{glob}', "
            "union_by_name = true, hive_partitioning = false)"
        )


def check_outcome(case: Case, workdir: Path) -> None:
    trace = workdir / "in" / case.name
    trace.parent.mkdir()
    trace.write_bytes(case.data)
    warehouse = workdir / "wh"
    stream = io.StringIO()

    result = ingest_paths([trace], warehouse, run="prop", jobs=1, progress=False, stream=stream)

    lake = warehouse / "lake"
    assert not list(lake.rglob("*.tmp")), "temporaries left behind"
    data_files = {
        table: [p for p in (lake / table).rglob("*.parquet") if p.name != "_empty.parquet"]
        for table in LAKE_TABLES
    }
    con = duckdb.connect()
    _lake(con, warehouse)
    counts = {
        table: con.execute(f"select count(*) from {table}").fetchone()[0] for table in LAKE_TABLES
    }

    if result.failed:
        (failed,) = result.failed
        assert failed.kind != "internal", f"parser bug: {failed.line()}"
        assert result.exit_code == 1 and not result.loaded
        assert failed.path == str(trace.resolve())
        assert failed.message and failed.hint
        lines = [ln for ln in stream.getvalue().splitlines() if ln.startswith("error: ")]
        assert lines == [failed.line()]
        assert not case.must_load, f"a valid trace failed: {failed.line()}"
        assert counts["ingest_errors"] == 1
        row = con.execute("select path, error_kind from ingest_errors").fetchone()
        assert row == (failed.path, failed.kind)
        for table in TRACE_TABLES:
            assert counts[table] == 0 and not data_files[table], f"partial write in {table}"
        return

    assert result.exit_code == 0 and len(result.loaded) == 1, result
    assert counts["ingest_errors"] == 0 and not data_files["ingest_errors"]
    for table in TRACE_TABLES:
        assert len(data_files[table]) == 1, table
    (loaded,) = result.loaded
    doc = _python_view(case.data)
    assert doc is not None, "loaded a file that is not a JSON object"
    events = doc["traceEvents"]
    slice_events = [ev for ev in events if isinstance(ev, dict) and ev.get("ph") in SLICE_PHASES]
    n = len(slice_events)
    (slice_count, flow_count, unpaired, event_count) = con.execute(
        "select slice_count, flow_count, unpaired_flow_events, event_count from traces"
    ).fetchone()
    assert counts["traces"] == 1
    assert event_count == len(events)
    assert counts["slices"] == slice_count == loaded.slices == n
    assert Counter(r[0] for r in con.execute("select name from slices").fetchall()) == Counter(
        ev.get("name") for ev in slice_events
    )
    assert con.execute("select count(distinct trace_id) from slices").fetchone()[0] in (0, 1)
    assert con.execute("select coalesce(sum(slice_count), 0) from threads").fetchone()[0] == n

    flow_events = [
        ev
        for ev in events
        if isinstance(ev, dict)
        and ev.get("ph") in FLOW_PHASES
        and ev.get("ts") is not None
        and ev.get("id") is not None
    ]
    assert counts["flows"] == flow_count == loaded.flows
    assert 2 * flow_count + unpaired == len(flow_events)
    bad_ends = con.execute(
        "select count(*) from flows where slice_out not between 0 and ? - 1 "
        "or slice_in not between 0 and ? - 1 or slice_out is null or slice_in is null",
        [n, n],
    ).fetchone()[0]
    assert bad_ends == 0, "flows pointing outside the trace's slices"
    con.close()


class Hang(BaseException):
    """Raised by the watchdog: a BaseException, so no ``except Exception`` swallows it."""


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Interrupt a hung ingest (Hypothesis' deadline only measures finished calls)."""

    def fire(signum: int, frame: object) -> None:
        raise Hang(f"ingest still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- tests


def test_unmutated_base_loads(tmp_path: Path) -> None:
    """The oracle holds on the real trace itself (and it has flows and instants)."""
    data = gzip.decompress(BASE_TRACE.read_bytes())
    check_outcome(Case(data, "rank-0.json"), tmp_path)
    phases = Counter(ev.get("ph") for ev in _base()["traceEvents"])
    assert phases["X"] > 1000 and phases["s"] and phases["f"] and phases["M"]


@seed(20_240_521)  # reproducible in CI; varied enough to reach deep into the parser
@settings(
    max_examples=80,
    deadline=timedelta(seconds=10),
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(case=mutated_traces())
def test_mutated_trace_loads_or_fails_cleanly(case: Case) -> None:
    with tempfile.TemporaryDirectory(prefix="tracehouse-prop-") as workdir:
        try:
            with watchdog(20):
                check_outcome(case, Path(workdir))
        except AssertionError as exc:
            raise AssertionError(f"mutations: {case.steps}; file {case.name}: {exc}") from exc
