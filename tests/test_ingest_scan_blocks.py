"""The compiled scanner hands its column buffers over without a copy (``Block``):
they must stay valid for as long as numpy or Arrow views them, however the
scanner's result is dropped, and read as the bytes the scanner wrote.

Why: a buffer freed under a live view would read garbage into the lake with
no error; the decoder-agreement tests would catch wrong values only while the
memory happened not to be reused.
"""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from tracehouse.ingest.kineto.engine import scanner_built

pytestmark = pytest.mark.skipif(not scanner_built(),
                                reason="the compiled scanner is not built")

TEXT = (b'{"traceEvents": [' + b",".join(
    b'{"ph": "X", "cat": "cpu_op", "name": "op%d", "pid": 1, "tid": 2, "ts": %d, "dur": 3}'
    % (i, 10 * i) for i in range(3000)) + b"]}")


def test_views_outlive_the_scan_result() -> None:
    from tracehouse.ingest import _kineto_scan

    out = _kineto_scan.scan(TEXT, 1024)
    ts = np.frombuffer(out["ts"], dtype=np.int64)
    offsets, data, valid = out["name"]
    assert len(valid) == 3000 and len(offsets) == 4 * 3001
    names = pa.StringArray.from_buffers(3000, pa.py_buffer(offsets), pa.py_buffer(data))
    del out, offsets, data, valid
    gc.collect()
    _kineto_scan.scan(TEXT, 1024)  # reuses freed memory, were any freed too early
    assert ts.tolist() == [10_000 * i for i in range(3000)]  # µs -> ns
    assert names.to_pylist() == [f"op{i}" for i in range(3000)]
    with pytest.raises((TypeError, ValueError)):
        np.frombuffer(_kineto_scan.scan(TEXT, 1024)["ts"], dtype=np.int64)[0] = 1
