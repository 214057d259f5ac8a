"""ingest.numpy_arrow gives what pa.array and np.unique give, without importing numpy.ma.

Why: ingest wraps numpy arrays as Arrow arrays and takes distinct values on
every trace; the helpers skip the ``numpy.ma`` import that ``pa.array`` and
``np.unique`` trigger (ingest/numpy_arrow.py says what it costs), and must
not change a value on the way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tracehouse.ingest.numpy_arrow import arrow_array, distinct, distinct_inverse

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto"
_RNG = np.random.default_rng(30)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.float64, np.bool_])
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1000])
def test_arrow_array_equals_pa_array(dtype: type, size: int) -> None:
    values = (_RNG.integers(-5, 5, size) > 0 if dtype is np.bool_
              else _RNG.integers(-2**7, 2**7 - 1, size).astype(dtype))
    mask = _RNG.integers(0, 3, size) == 0
    assert arrow_array(values).equals(pa.array(values))
    assert arrow_array(values, mask=mask).equals(pa.array(values, mask=mask))
    if dtype is not np.bool_:
        wanted = pa.int64()
        assert arrow_array(values, wanted, mask=mask).equals(
            pa.array(values, wanted, mask=mask))


def test_arrow_array_of_a_strided_view_and_its_negation() -> None:
    values = np.arange(20, dtype=np.int64)[::3]
    flags = values % 2 == 0
    assert arrow_array(values).equals(pa.array(values))
    assert arrow_array(~flags, pa.bool_()).equals(pa.array(~flags, pa.bool_()))


def test_arrow_array_refuses_what_it_does_not_wrap() -> None:
    with pytest.raises(ValueError, match="1-D"):
        arrow_array(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="length"):
        arrow_array(np.zeros(3), mask=np.zeros(2, dtype=bool))
    with pytest.raises(TypeError, match="numeric and boolean"):
        arrow_array(np.zeros(3), pa.string())


@pytest.mark.parametrize("size", [0, 1, 2, 50, 5000])
def test_distinct_equals_np_unique(size: int) -> None:
    values = _RNG.integers(-20, 20, size)
    assert np.array_equal(distinct(values), np.unique(values))
    keys, inverse = distinct_inverse(values)
    want_keys, want_inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(keys, want_keys)
    assert np.array_equal(inverse, want_inverse.reshape(-1))


_CHILD = """
import sys
from pathlib import Path
from tracehouse.ingest.no_pandas import keep_pandas_out
keep_pandas_out()
from tracehouse.ingest.runner import ingest_paths
result = ingest_paths([Path(sys.argv[1])], Path(sys.argv[2]), progress=False)
assert len(result.loaded) == 1, result.failed
print("numpy.ma" in sys.modules)
"""


@pytest.mark.slow
def test_a_kineto_ingest_never_imports_numpy_ma(tmp_path: Path) -> None:
    trace = SHARED / "single_rank" / "a100_nccl_pg_args.json.gz"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(trace), str(tmp_path / "wh")],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.split() == ["False"]
