"""Each Nsight slice's name, looked up after the sort (ingest/nsys/names.py).

Why it matters: the names used to be made by the sort's SQL (joins on
StringIds); they are now made per activity table in Arrow and taken by
each slice's source row, so a wrong rule or pointer would rename kernels,
calls or NVTX ranges in the lake. Every rule is checked on hand-made rows,
including ids StringIds lacks, NULL codes and a shared name.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracehouse.ingest.nsys.args import SOURCE_CODE
from tracehouse.ingest.nsys.names import NAME_IDS, slice_names

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


def test_each_source_row_gets_its_name_in_any_order() -> None:
    src = np.array([SOURCE_CODE[key] for key, names in EXPECTED.items() for _ in names])
    src_row = np.array([row for names in EXPECTED.values() for row in range(len(names))])
    order = np.random.default_rng(3).permutation(src.size)
    got = slice_names(SOURCES, SOURCE_CODE, STRINGS, src[order], src_row[order])
    assert got.type == NAME_IDS
    expected = [name for names in EXPECTED.values() for name in names]
    assert got.cast(pa.string()).to_pylist() == [expected[i] for i in order]
    dictionary = got.chunks[0].dictionary.to_pylist()
    assert len(dictionary) == len(set(dictionary))  # "gemm" of a kernel and a range: once


def test_a_gpu_without_some_tables_and_without_rows() -> None:
    only_nvtx = {"nvtx": SOURCES["nvtx"], "kernel": SOURCES["kernel"].slice(0, 0)}
    got = slice_names(only_nvtx, SOURCE_CODE, STRINGS,
                      np.array([SOURCE_CODE["nvtx"]] * 2), np.array([2, 0]))
    assert got.cast(pa.string()).to_pylist() == ["", "forward"]
    empty = slice_names(only_nvtx, SOURCE_CODE, STRINGS, np.array([], np.int64),
                        np.array([], np.int64))
    assert len(empty) == 0 and empty.type == NAME_IDS
