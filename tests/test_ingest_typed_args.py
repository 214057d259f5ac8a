"""The scanner's typed args columns equal msgspec's on any args object (issue 30).

The compiled scanner decides ``correlation``, ``Process Group Ranks`` and the
other typed keys itself, by the rules of ``ingest.kineto.decode.decode_args`` (a
value of another type is NULL); what it does not decide exactly (an int
beyond int64, a duplicate or escaped key, an odd rank list) it hands to
msgspec. Either way the lake must equal the msgspec decoder's: checked here
on hand-picked edge cases and on Hypothesis' args objects.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ingest_decoders import assert_same, needs_scanner

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

TYPED_KEYS = ["correlation", "External id", "device", "stream", "Group size", "In msg nelems",
              "Out msg nelems", "Collective name", "Process Group Name",
              "Process Group Description", "dtype", "Process Group Ranks"]
OTHER_KEYS = ["name", "labels", "sort_index", "Input Dims", "Ev Idx"]


def _trace(args_texts: list[str], category: str = "kernel") -> bytes:
    events = [
        f'{{"ph": "X", "cat": "{category}", "name": "k{i}", "pid": 0, "tid": 7, '
        f'"ts": {1000 + 10 * i}, "dur": 5, "args": {text}}}'
        for i, text in enumerate(args_texts)
    ]
    events.append('{"ph": "X", "cat": "kernel", "name": "plain", "pid": 0, "tid": 7, '
                  '"ts": 5000, "dur": 1}')
    return ('{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": ['
            + ", ".join(events) + "]}").encode()


EDGE_CASES = [
    '{"correlation": 1.0, "stream": true, "device": "3", "External id": -0}',
    '{"correlation": 9223372036854775807, "External id": -9223372036854775808}',
    '{"correlation": 9223372036854775808}',
    '{"correlation": 1, "correlation": 2}',
    '{"corr\\u0065lation": 5}',
    '{"Process Group Name": 12, "Process Group Description": null, "dtype": "Float\\n"}',
    '{"Process Group Name": -0, "Collective name": 7}',
    '{"Process Group Name": 1.5, "Collective name": "all\\u00e9reduce"}',
    '{"Process Group Ranks": "[0, 1, 2]"}',
    '{"Process Group Ranks": " [ 0 ,1,  2 ] "}',
    '{"Process Group Ranks": "[]"}',
    '{"Process Group Ranks": ""}',
    '{"Process Group Ranks": "[0, 1, ...]"}',
    '{"Process Group Ranks": "[[1]]"}',
    '{"Process Group Ranks": "[007, -3]"}',
    '{"Process Group Ranks": "[1,,2]"}',
    '{"Process Group Ranks": [3, 4]}',
    '{"Process Group Ranks": []}',
    '{"Process Group Ranks": 5}',
    '{"Process Group Ranks": null, "Group size": {"a": [1]}}',
    '{"Process Group Ranks": "[9223372036854775808]"}',
    '{"name": 5, "labels": [1], "sort_index": "x", "correlation": 4}',
    '{}',
]


@needs_scanner
@pytest.mark.parametrize("args", EDGE_CASES)
def test_scanner_and_msgspec_agree_on_edge_cases(args: str) -> None:
    assert_same(_trace([args, '{"correlation": 3, "Process Group Ranks": "[0, 1]"}']))


@needs_scanner
def test_python_function_args_are_not_typed() -> None:
    assert_same(_trace(['{"correlation": 3, "Python id": 1}'], category="python_function"))


_values = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(min_value=-5, max_value=2**63 + 5), max_size=3),
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2)), max_size=2),
    st.from_regex(r"\A ?\[? ?(-?[0-9]{1,3} ?, ?){0,3}-?[0-9]{0,3} ?\]? ?\Z"),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


@needs_scanner
@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(TYPED_KEYS + OTHER_KEYS), _values, max_size=5),
                min_size=1, max_size=4))
def test_scanner_and_msgspec_agree_on_any_args(objects: list[dict]) -> None:
    assert_same(_trace([json.dumps(obj) for obj in objects]))
