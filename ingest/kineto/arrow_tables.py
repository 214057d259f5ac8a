"""Arrow columns and lake tables from decoded trace values, shared by both Kineto engines.

Why one place: the native and the Perfetto engine must give byte-identical
columns for the same values (types, NULLs, the errors a bad value raises),
so both build their tables through these helpers.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa

from ..numpy_arrow import arrow_array
from ..trace_types import TraceError


def str_or_none(value: object) -> str | None:
    """``value`` as text (a pid, a tid, a group name may be a JSON number), NULL kept."""
    return None if value is None else str(value)


def raw_lengths(raws: Sequence[msgspec.Raw]) -> np.ndarray:
    """Byte length of each raw JSON value (0 where absent), for :func:`json_column`."""
    return np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))


def typed_array(values: Sequence[object], type_: pa.DataType, column: str) -> pa.Array:
    """Python values as an Arrow array of ``type_``; a value that does not fit is a
    TraceError naming ``column`` (bad UTF-8, a number beyond the type)."""
    try:
        return pa.array(values, type=type_)
    except (OverflowError, pa.ArrowInvalid) as exc:
        if "UTF8" in str(exc) or "utf8" in str(exc).lower():
            raise TraceError("invalid_utf8", f"invalid UTF-8 in column {column}",
                             "JSON must be UTF-8; re-export the trace") from exc
        raise TraceError("number_out_of_range", f"a value of {column} does not fit "
                         f"{type_}: {exc}", "check the numbers in the trace's args") from exc


def json_column(raws: Sequence[msgspec.Raw], column: str,
                lengths: np.ndarray | None = None) -> pa.Array:
    """Raw JSON bytes → a validated UTF-8 string column (NULL where absent).

    Built from one joined buffer and an offsets array: no per-value copy.
    """
    if lengths is None:
        lengths = raw_lengths(raws)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    present = lengths > 0
    validity = None if present.all() else arrow_array(present).buffers()[1]
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), lengths.size,
        [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))],
    )
    try:
        return binary.cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid as exc:
        raise TraceError("invalid_utf8", f"invalid UTF-8 in {column}",
                         "JSON must be UTF-8; re-export the trace") from exc


def lake_table(columns: dict[str, pa.Array | Sequence[object]], target: pa.Schema) -> pa.Table:
    """The lake table of schema ``target`` from its columns by name (arrays cast to the
    schema's types, Python lists converted by :func:`typed_array`)."""
    arrays = []
    for field in target:
        values = columns[field.name]
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arrays.append(values if values.type == field.type else values.cast(field.type))
        else:
            arrays.append(typed_array(values, field.type, field.name))
    return pa.Table.from_arrays(arrays, schema=target)


def repeat(value: object, n: int, type_: pa.DataType) -> pa.Array:
    """``value`` ``n`` times (run_id, rank, trace_id on every row), built in C++."""
    return pa.repeat(pa.scalar(value, type=type_), n)
