"""Times land exact to the nanosecond, whatever number form the trace uses (issue 14).

Kineto writes ``ts`` either relative to ``baseTimeNanoseconds`` or as
absolute epoch microseconds with a fractional part in ns
(``1694128201545123.456``, 19 significant digits). A decoder that reads
the number as a float64 is up to ~128 ns off on the latter, enough to move
a slice under another parent. These tests build such traces from a real
one and from Hypothesis, and compare every time, parent and depth with
values computed from the digits (``decimal``), independently of the parser.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import time
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA
from tracehouse.ingest.json_numbers import json_number_to_ns
from tracehouse.ingest.kineto.engine import KinetoEngine, scanner_built
from tracehouse.ingest.kineto.native import parse_kineto
from tracehouse.ingest.kineto.trace_rows import LoadedFile
from tracehouse.ingest.trace_types import TraceFile

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

A100 = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"
_NUMBER = re.compile(r'"@@N:([^"@]+)@@"')


def _dumps(doc: object) -> bytes:
    """JSON with ``Decimal`` values written as their exact digits (json cannot)."""

    def mark(value: object) -> object:
        if isinstance(value, Decimal):
            return f"@@N:{value}@@"
        raise TypeError(type(value))

    return _NUMBER.sub(r"\1", json.dumps(doc, default=mark)).encode()


def _ns(text: Decimal) -> int:
    return int((text * 1000).to_integral_value(ROUND_HALF_EVEN))


#: Both decoders must be exact: the compiled scanner (where built) and msgspec.
DECODERS = [KinetoEngine.MSGSPEC] + ([KinetoEngine.SCANNER] if scanner_built() else [])


def _parse(data: bytes, name: str = "rank-0.json",
           decoder: KinetoEngine = KinetoEngine.NATIVE):
    source = TraceFile(path=Path("/nowhere") / name, run_id="r", layout="hta", rank_hint=0,
                       iteration_hint=None, size_bytes=len(data), mtime_ns=0)
    loaded = LoadedFile(trace_id="t", content_hash="h", uncompressed_bytes=len(data),
                        file_format="kineto_json", ingested_at=dt.datetime.now(dt.timezone.utc))
    return parse_kineto(data, source, loaded, decoder)


@pytest.mark.skipif(not A100.is_file(), reason=f"shared trace {A100} not found")
@pytest.mark.parametrize("decoder", DECODERS)
def test_epoch_microseconds_with_fractional_ns_match_the_relative_form(
        decoder: KinetoEngine) -> None:
    """The real A100 trace, rewritten with absolute epoch µs (fractional ns) and no
    ``baseTimeNanoseconds``, gives the very same slices as the original: every ts,
    dur, parent and depth (a float64 reading moves hundreds of parents)."""
    doc = json.loads(gzip.decompress(A100.read_bytes()), parse_float=Decimal)
    base = Decimal(doc.pop("baseTimeNanoseconds")) / 1000
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] = base + Decimal(event["ts"])
    absolute = _dumps(doc)
    assert re.search(rb'"ts": 17\d{14}\.\d{3}[,}]', absolute), "no epoch µs with ns digits"

    original = _parse(gzip.decompress(A100.read_bytes()), decoder=decoder).tables["slices"]
    rewritten = _parse(absolute, decoder=decoder).tables["slices"]
    for column in ("ts", "dur", "parent_id", "depth", "is_partial_overlap", "track_id"):
        assert rewritten[column].equals(original[column]), column
    # and the times are the digits' own, not just self-consistent
    expected = [_ns(e["ts"]) for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "I")]
    assert rewritten["ts"].to_pylist() == expected


# --------------------------------------------------------------------------- property

EPOCH_US = 1_694_128_201_545_123


@st.composite
def number_text(draw: st.DrawFn, low: int, high: int) -> tuple[str, int]:
    """A JSON number in µs in one of the forms writers use, and its exact ns."""
    ns = draw(st.integers(low, high))
    whole, frac = divmod(ns, 1000)
    form = draw(st.sampled_from(["int", "3dp", "short", "long", "exp"]))
    if form == "int" or (form == "short" and frac % 10):
        ns = whole * 1000
        return str(whole), ns
    if form == "3dp":
        return f"{whole}.{frac:03d}", ns
    if form == "short":  # "…545123.45": trailing zeros dropped
        return f"{whole}.{frac:03d}".rstrip("0").rstrip("."), ns
    if form == "long":  # sub-ns digits: rounds half to even
        extra = draw(st.sampled_from(["5", "50", "4999", "5001", "0001", "9"]))
        text = f"{whole}.{frac:03d}{extra}"
        return text, _ns(Decimal(text))
    text = f"{Decimal(ns) / 1000:E}"  # 1.694128201545123456E+15
    return text, _ns(Decimal(text))


@st.composite
def traces(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, int]]]:
    """A small trace of X and i events on two threads, times near the epoch and
    nested (children drawn inside parents, some overlapping); returns the bytes and
    each slice event's exact (track, ts, dur) in file order."""
    events, expected = [], []
    for _ in range(draw(st.integers(1, 25))):
        tid = draw(st.sampled_from([1, 2]))
        ts_text, ts_ns = draw(number_text(EPOCH_US * 1000, EPOCH_US * 1000 + 5_000))
        ph = draw(st.sampled_from(["X", "X", "X", "i"]))
        event = f'{{"ph": "{ph}", "name": "e", "cat": "c", "pid": 7, "tid": {tid}, ' \
                f'"ts": {ts_text}'
        dur_ns = 0
        if ph == "X":
            dur_text, dur_ns = draw(number_text(0, 3_000))
            event += f', "dur": {dur_text}'
        events.append(event + "}")
        expected.append((tid, ts_ns, dur_ns))
    data = ('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, '
            '"traceEvents": [' + ", ".join(events) + "]}").encode()
    return data, expected


def _reference_nesting(slices: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """Parent and depth by brute force: in (track, start, longest first, file order)
    order, a slice's parent is the nearest earlier slice on its track that ends at
    or after it (a zero-length slice at another's end is not inside it)."""
    order = sorted(range(len(slices)),
                   key=lambda i: (slices[i][0], slices[i][1], -slices[i][2], i))
    parent = [-1] * len(slices)
    for pos, i in enumerate(order):
        track, ts, dur = slices[i]
        need = ts + dur + (1 if dur == 0 else 0)
        for j in reversed(order[:pos]):
            if slices[j][0] == track and slices[j][1] + slices[j][2] >= need:
                parent[i] = j
                break
    depth = []
    for i in range(len(slices)):
        d, p = 0, parent[i]
        while p >= 0:
            d, p = d + 1, parent[p]
        depth.append(d)
    return parent, depth


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_every_number_form_lands_exact(trace: tuple[bytes, list[tuple[int, int, int]]]) -> None:
    data, expected = trace
    for decoder in DECODERS:
        if decoder is KinetoEngine.SCANNER:  # the scanner reads these itself, not via msgspec
            from tracehouse.ingest.kineto.scan import scan_columns

            assert scan_columns(data) is not None
        _check_exact(_parse(data, decoder=decoder).tables["slices"], expected)


def _check_exact(slices, expected: list[tuple[int, int, int]]) -> None:
    assert slices["ts"].to_pylist() == [ts for _, ts, _ in expected]
    assert slices["dur"].to_pylist() == [dur for _, _, dur in expected]
    tracks = slices["track_id"].to_pylist()
    local = [(tracks[i], ts, dur) for i, (_, ts, dur) in enumerate(expected)]
    parent, depth = _reference_nesting(local)
    assert [p if p is not None else -1 for p in slices["parent_id"].to_pylist()] == parent
    assert slices["depth"].to_pylist() == depth


@settings(max_examples=150, deadline=None)
@given(st.integers(-(10**40), 10**40), st.integers(-45, 25))
def test_number_text_rounds_half_to_even_at_any_precision(mantissa: int, exponent: int) -> None:
    """The fallback's reading of any JSON number (up to 41 digits, any exponent) equals
    exact decimal arithmetic; the compiled scanner reads the same numbers in a trace."""
    text = f"{mantissa}e{exponent}"
    with localcontext() as ctx:
        ctx.prec = 200
        exact = int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))
    got = json_number_to_ns(text.encode())
    if abs(exact) <= 2**63 - 1:
        assert got == exact
        data = (b'{"traceEvents": [{"ph": "i", "pid": 1, "tid": 1, "ts": %s}]}'
                % text.encode())
        for decoder in DECODERS:
            assert _parse(data, decoder=decoder).tables["slices"]["ts"].to_pylist() == [exact]
    else:
        assert abs(got) > 2**63 - 1


def test_huge_exponents_cost_nothing() -> None:
    started = time.perf_counter()
    assert abs(json_number_to_ns(b"1e999999999")) > 2**63
    assert json_number_to_ns(b"-1e-999999999") == 0
    assert time.perf_counter() - started < 0.1
