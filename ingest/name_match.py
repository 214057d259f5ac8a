"""A string test of each slice name, on plain or dictionary-encoded name columns.

Why: the Nsight loader holds a GPU's slice names as indices into their
distinct values (``ingest/nsys/parse.py``, ``name_ids``: 4.4 M names, ~9.5 k
distinct on a 713 MB export), and Arrow's string kernels (``starts_with``,
``match_substring_regex``) take no dictionaries. On a dictionary column the
test runs once per distinct name and is taken for every row, which is also
cheaper; on plain text (Kineto's slices) it runs as before.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

NameColumn = pa.ChunkedArray | pa.Array


def per_name(names: NameColumn, test: Callable[[pa.Array], pa.Array]) -> NameColumn:
    """``test`` (an Arrow function of a string array) of each of ``names``, row for row."""
    if not pa.types.is_dictionary(names.type):
        return test(names)
    if isinstance(names, pa.ChunkedArray):
        return pa.chunked_array([_per_distinct(chunk, test) for chunk in names.chunks],
                                test(pa.array([], pa.string())).type)
    return _per_distinct(names, test)


def _per_distinct(names: pa.DictionaryArray, test: Callable[[pa.Array], pa.Array]) -> pa.Array:
    return pc.take(test(names.dictionary), names.indices)
