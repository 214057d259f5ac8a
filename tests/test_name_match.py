"""String tests of slice names give the same answer on text and on dictionary indices.

Why it matters: the Nsight loader holds a GPU's names as indices into their
distinct values (ingest/nsys/parse.py, ``name_ids``) while Kineto's parsers
hold text, and the slice context (``has_role``, profiler steps) must mark the
same rows either way, or the lake would differ by loader.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from tracehouse.ingest.name_match import per_name
from tracehouse.ingest.nsys.names import NAME_IDS
from tracehouse.ingest.slice_context import _has_role

NAMES = [["ProfilerStep#3", "c10d::allreduce_", None, "gloo:broadcast"],
         ["ProfilerStep#x", "nccl:all_reduce", "ProfilerStep#3", "c10d::barrier", ""]]


def name_ids(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """Names as the Nsight loader holds them: indices into one dictionary."""
    return pc.dictionary_encode(text).unify_dictionaries().cast(NAME_IDS)


def _step(text: pa.Array) -> pa.Array:
    return pc.match_substring_regex(text, r"^ProfilerStep#[0-9]+$")


def test_a_test_per_name_equals_it_on_the_text() -> None:
    text = pa.chunked_array(NAMES, pa.string())
    expected = _step(text).to_pylist()
    assert per_name(text, _step).to_pylist() == expected
    assert per_name(name_ids(text), _step).to_pylist() == expected
    assert per_name(name_ids(text).combine_chunks(), _step).to_pylist() == expected
    assert expected == [True, False, None, False, False, False, True, False, False]


def test_has_role_is_the_same_on_text_and_indices() -> None:
    text = pa.chunked_array(NAMES, pa.string())
    is_gpu = pa.array([False] * 8 + [True]).to_numpy(zero_copy_only=False)
    frame_kind = pa.chunked_array([[None] * 9], pa.string())
    on_text = _has_role(text, is_gpu, frame_kind).to_pylist()
    assert _has_role(name_ids(text), is_gpu, frame_kind).to_pylist() == on_text
    assert on_text == [True, True, False, True, False, False, True, True, True]
