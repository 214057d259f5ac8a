"""Copy a column that came from DuckDB or the ADBC driver, so its record batches can go.

Why: a table handed over through Arrow's C data interface (DuckDB's
``to_arrow_table``, the ADBC driver's record batches) frees a record
batch's memory only when every column of that batch is released. One
column kept zero-copy keeps the whole batch: on a 713 MB export's GPU the
slices' ``category`` kept the sorted rows' names and sort keys alive, and
the args' few source columns the whole NVTX table (RSS 2.0 GiB after the
mapping, 1.5 GiB with the kept columns copied). A copy costs a pass over
the kept column only.
"""

from __future__ import annotations

import pyarrow as pa


def owned(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` copied into buffers of its own (Arrow's pool), one chunk."""
    if not column.num_chunks:
        return pa.chunked_array([], column.type)
    return pa.chunked_array([pa.concat_arrays(column.chunks)], column.type)
