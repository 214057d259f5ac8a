"""Each Nsight slice's name, made from its activity table's row (ingest/nsys/names.py).

Why it matters: the names are made per activity table in Arrow, a batch of
rows at a time, with StringIds looked up through a sorted index; a wrong
rule or lookup would rename kernels, calls or NVTX ranges in the lake.
Every rule is checked on hand-made rows, including ids StringIds lacks,
NULL codes and NULL strings.
"""

from __future__ import annotations

import pyarrow as pa

from tracehouse.ingest.nsys.names import StringLookup, source_names

STRINGS = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                    "value": ["void gemm<float>(int)", "gemm", "cudaLaunchKernel_v7000",
                              "cuMemcpy_v2x", None]})
SOURCES = {
    "kernel": pa.table({"demangledName": pa.array([1, 99, None, 5], pa.int64()),
                        "shortName": pa.array([2, 2, None, None], pa.int64())}),
    "memcpy": pa.table({"copyKind": pa.array([8, None], pa.int64()),
                        "srcKind": pa.array([2, 42], pa.int64()),
                        "dstKind": pa.array([1, 2], pa.int64())}),
    "memset": pa.table({"memKind": pa.array([2, None], pa.int64())}),
    "graph": pa.table({"graphId": pa.array([7, None], pa.int64())}),
    "runtime": pa.table({"nameId": pa.array([3, 99, 4], pa.int64())}),
    "nvtx": pa.table({"text": pa.array(["forward", None, None], pa.string()),
                      "textId": pa.array([1, 2, 99], pa.int64())}),
}
EXPECTED = {
    "kernel": ["void gemm<float>(int)", "gemm", "kernel", "kernel"],
    "memcpy": ["Memcpy DtoD (Device -> Pinned)", "Memcpy Unknown (Unknown -> Device)"],
    "memset": ["Memset (Device)", "Memset (Unknown)"],
    "graph": ["CUDA graph 7", "CUDA graph -1"],
    "runtime": ["cudaLaunchKernel", "cuda call", "cuMemcpy_v2x"],
    "nvtx": ["forward", "gemm", ""],
}


def test_each_table_row_gets_its_name() -> None:
    strings = StringLookup(STRINGS)
    for key, expected in EXPECTED.items():
        assert source_names(key, SOURCES[key], strings).to_pylist() == expected, key


def test_string_lookup_is_a_left_join_in_any_order() -> None:
    shuffled = STRINGS.take(pa.array([3, 0, 4, 2, 1]))
    lookup = StringLookup(shuffled)
    got = lookup(pa.array([5, None, 2, 99, 1, 1], pa.int64()))
    assert got.to_pylist() == [None, None, "gemm", None, "void gemm<float>(int)",
                               "void gemm<float>(int)"]
    assert StringLookup(STRINGS.slice(0, 0))(pa.array([1], pa.int64())).to_pylist() == [None]
