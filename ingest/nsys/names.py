"""The name of each Nsight slice, made from its activity table's row.

The text is what the loader always made: a kernel's demangled name (else
its short name, else ``kernel``); ``Memcpy <kind> (<src> -> <dst>)`` and
``Memset (<kind>)`` as Kineto names copies and fills; ``CUDA graph <id>``;
a CUDA call's name without its ``_v<N>`` suffix; an NVTX event's text, else
the string its ``textId`` names, else empty. Made in Arrow for the rows of
each activity table in a read batch (:mod:`.write`), ``StringIds`` looked up
through a sorted index built once per GPU (:class:`StringLookup`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Slice names as indices into their distinct values (the type
#: :mod:`ingest.name_match` tests on).
NAME_IDS = pa.dictionary(pa.int32(), pa.string())

_MEMCPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD (Unified)",
                12: "DtoH (Unified)", 13: "DtoD (Unified)"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}
#: A CUDA call's version suffix, dropped as Kineto shows the calls.
_VERSION_SUFFIX = r"_v[0-9]+$"


class StringLookup:
    """``StringIds`` (or any ``id, value`` table) as a sorted index: the value of each id.

    Built once per GPU, where ``pc.index_in`` built a hash table of every id on each call
    (once per activity table and write batch)."""

    def __init__(self, table: pa.Table) -> None:
        ids = pc.fill_null(table.column("id"), -1).to_numpy(zero_copy_only=False)
        order = np.argsort(ids.astype(np.int64), kind="stable")
        self._ids = ids.astype(np.int64)[order]
        values = table.column("value")
        self._values = (values.combine_chunks() if values.num_chunks
                        else pa.array([], values.type)).take(pa.array(order))

    def __call__(self, ids: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The value of each id (NULL for NULL or an id without one, as a left join)."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.int64())
        wanted = pc.fill_null(ids, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if not self._ids.size:
            return pa.nulls(len(ids), self._values.type)
        at = np.minimum(np.searchsorted(self._ids, wanted), self._ids.size - 1)
        hit = (self._ids[at] == wanted) & ids.is_valid().to_numpy(zero_copy_only=False)
        return self._values.take(pa.array(at, mask=~hit))


def source_names(key: str, table: pa.Table, strings: StringLookup) -> pa.Array:
    """The name of each row of activity table ``key``, in row order (never NULL)."""
    def looked_up(column: str) -> pa.Array:
        return strings(table[column])

    if key == "kernel":
        return pc.coalesce(looked_up("demangledName"), looked_up("shortName"), "kernel")
    if key in ("runtime", "driver"):
        # The suffix dropped once per distinct string, not per call.
        named = pc.dictionary_encode(pc.coalesce(looked_up("nameId"), "cuda call"))
        stripped = pc.replace_substring_regex(named.dictionary, _VERSION_SUFFIX, "",
                                              max_replacements=1)
        return pc.take(stripped, named.indices)
    if key == "nvtx":
        return pc.coalesce(table["text"].combine_chunks(), looked_up("textId"), "")
    if key == "memcpy":
        kinds = [_label(table["copyKind"], _MEMCPY_KIND), _label(table["srcKind"], _MEM_KIND),
                 _label(table["dstKind"], _MEM_KIND)]
        return pc.binary_join_element_wise("Memcpy ", kinds[0], " (", kinds[1], " -> ",
                                           kinds[2], ")", "")
    if key == "memset":
        return pc.binary_join_element_wise("Memset (", _label(table["memKind"], _MEM_KIND),
                                           ")", "")
    if key == "graph":
        graph = pc.cast(pc.fill_null(table["graphId"].combine_chunks(), -1), pa.string())
        return pc.binary_join_element_wise("CUDA graph ", graph, "")
    raise ValueError(f"no names for activity table {key!r}")


def _label(codes: pa.ChunkedArray, labels: dict[int, str]) -> pa.Array:
    """Each code's label, ``Unknown`` for a code without one (NULL included)."""
    at = pc.index_in(codes.combine_chunks(), value_set=pa.array(list(labels), pa.int64()))
    return pc.fill_null(pc.take(pa.array(list(labels.values())), at), "Unknown")
