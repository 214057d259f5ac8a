"""Each trace says whether its CPU ops carry shapes (``traces.has_op_shapes``).

The per-kernel FLOP model reads CPU ops' args only for traces with shapes
(int_kernels_flops_attributed), so this flag must be right for every way a
trace says it: Kineto's header ``record_shapes`` when present (PyTorch
writes 0 or 1), else whether any ``cpu_op`` carries ``Input Dims``. Both
Kineto decoders (the compiled scanner and msgspec) must agree; the Perfetto
engine is compared with them in tests/test_perfetto_engine.py.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

from conftest import SHARED_DATA
from tracehouse.ingest.kineto import trace_rows
from tracehouse.ingest.kineto.engine import KinetoEngine, scanner_built
from tracehouse.ingest.kineto.native import parse_kineto
from tracehouse.ingest.kineto.trace_rows import LoadedFile
from tracehouse.ingest.trace_types import TraceFile

DLRM_RANK0 = (SHARED_DATA / "kineto" / "dlrm_8rank"
              / "worker0_step_12.1694128201545.pt.trace.json.gz")
A100 = SHARED_DATA / "kineto" / "single_rank" / "a100_nccl_pg_args.json.gz"
DECODERS = [KinetoEngine.MSGSPEC] + ([KinetoEngine.SCANNER] if scanner_built() else [])


def _has_op_shapes(data: bytes, decoder: KinetoEngine) -> bool | None:
    source = TraceFile(path=Path("/nowhere/rank-0.json"), run_id="r", layout="hta",
                       rank_hint=0, iteration_hint=None, size_bytes=len(data), mtime_ns=0)
    loaded = LoadedFile(trace_id="t", content_hash="h", uncompressed_bytes=len(data),
                        file_format="kineto_json", ingested_at=dt.datetime.now(dt.timezone.utc))
    parsed = parse_kineto(data, source, loaded, decoder)
    return parsed.tables["traces"]["has_op_shapes"][0].as_py()


def _dlrm(**header: object) -> bytes:
    """DLRM rank 0 (recorded with shapes, header ``record_shapes: 1``), its header
    key replaced by ``header`` (``record_shapes=None``: removed)."""
    doc = json.loads(gzip.decompress(DLRM_RANK0.read_bytes()))
    for key, value in header.items():
        if value is None:
            doc.pop(key)
        else:
            doc[key] = value
    return json.dumps(doc).encode()


pytestmark = pytest.mark.skipif(not (DLRM_RANK0.is_file() and A100.is_file()),
                                reason=f"shared traces {DLRM_RANK0} / {A100} not found")


@pytest.mark.parametrize("decoder", DECODERS)
def test_header_record_shapes_decides(decoder: KinetoEngine) -> None:
    assert _has_op_shapes(gzip.decompress(DLRM_RANK0.read_bytes()), decoder) is True
    # The header is the profiler's setting: it wins over what the ops carry.
    assert _has_op_shapes(_dlrm(record_shapes=0), decoder) is False
    assert _has_op_shapes(_dlrm(record_shapes=True), decoder) is True


@pytest.mark.parametrize("decoder", DECODERS)
def test_without_the_header_the_ops_input_dims_decide(decoder: KinetoEngine) -> None:
    assert _has_op_shapes(_dlrm(record_shapes=None), decoder) is True
    # An odd header value says nothing: the ops decide.
    assert _has_op_shapes(_dlrm(record_shapes="yes"), decoder) is True
    # The A100 trace has no header key and no op with Input Dims.
    assert _has_op_shapes(gzip.decompress(A100.read_bytes()), decoder) is False


def test_a_key_outside_cpu_ops_or_outside_the_rows_is_no_shape() -> None:
    """The whole-buffer search (trace_rows._mentions) only lets the row search be skipped:
    a hit in a kernel's args, or in bytes of a sliced array outside its rows, must
    still give False, and a hit on a cpu_op True."""
    args = pa.array(['{"Input Dims": [[1]]}', '{"x": 1}', '{"Input Dims": [[2]]}'])
    category = pa.array(["kernel", "cpu_op", "cpu_op"])
    table = pa.table({"category": category, "args": args})
    no_flag = msgspec.Raw(b"")
    assert trace_rows.has_op_shapes(no_flag, table) is True
    assert trace_rows.has_op_shapes(no_flag, table.slice(0, 2)) is False
    assert trace_rows._mentions(table.slice(1, 1)["args"], trace_rows._INPUT_DIMS_BYTES) is True
    assert trace_rows.has_op_shapes(no_flag, table.slice(1, 1)) is False
    without = pa.table({"category": category, "args": pa.array(['{"a": 1}', None, "{}"])})
    assert trace_rows._mentions(without["args"], trace_rows._INPUT_DIMS_BYTES) is False
    assert trace_rows.has_op_shapes(no_flag, without) is False
