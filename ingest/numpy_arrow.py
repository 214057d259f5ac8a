"""Arrow arrays over numpy arrays' memory, and the distinct values of numpy arrays,
without importing ``numpy.ma``.

Why: ``pa.array(ndarray)`` asks ``isinstance(values, np.ma.MaskedArray)``
and numpy 2.4's ``np.unique`` asks ``np.ma.is_masked``; either first touch
imports ``numpy.ma``, whose import parses the signatures of numpy's
functions (``inspect``, ``tokenize``): ~10 ms of CPU, up to ~20 ms of wall
and 2 MiB of RSS in every ingest process, a sixth of a 1.8 MB trace's whole
load (benchmarks/README.md, "The small rows' fixed cost"). Ingest converts
only plain 1-D numeric and boolean arrays, which Arrow can wrap from their
buffers directly (what ``pa.array`` does for them, without the check).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def arrow_array(values: np.ndarray, type: pa.DataType | None = None,  # noqa: A002 (pa's name)
                mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type=type, mask=mask)`` for a 1-D numeric or boolean array.

    ``mask``: True where the value is NULL (pyarrow's convention). ``type``:
    the Arrow type wanted, when it differs from the array's own (the values
    are converted by numpy first, as ``pa.array`` would cast them).
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"a 1-D array is needed, not {values.ndim}-D")
    if type is None:
        type = pa.from_numpy_dtype(values.dtype)
    if pa.types.is_boolean(type):
        data = pa.py_buffer(np.packbits(values.astype(np.bool_, copy=False),
                                        bitorder="little"))
    elif pa.types.is_integer(type) or pa.types.is_floating(type):
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=type.to_pandas_dtype()))
    else:
        raise TypeError(f"only numeric and boolean arrays are wrapped here, not {type}")
    validity, nulls = None, 0
    if mask is not None:
        mask = np.asarray(mask, dtype=np.bool_)
        if mask.shape != values.shape:
            raise ValueError("the mask and the values differ in length")
        nulls = int(np.count_nonzero(mask))
        if nulls:
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(type, values.size, [validity, data], null_count=nulls)


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array (``np.unique(values)``)."""
    ordered = np.sort(values, kind="stable")
    return ordered[_firsts(ordered)]


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each value among them):
    ``np.unique(values, return_inverse=True)`` for a 1-D array."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = _firsts(ordered)
    inverse = np.empty(values.size, dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """True where a sorted array's value differs from the one before it (and at 0)."""
    first = np.empty(ordered.size, dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first
