"""The name of each slice of an Nsight GPU, as indices into one table of distinct names.

Why apart from the sort (:func:`ingest.nsys.parse._sorted_rows`): DuckDB's
sort of a GPU's rows carried each row's name as text, joined from
``StringIds`` (4.4 M names per GPU of a 713 MB export, ~270 MiB of text
sorted, handed over and held), which made the sort the load's peak. The
sort now carries only numbers, among them each slice's source table and
row (``src``, ``src_row``, which the args use too), and the names are
looked up here after it: each activity table's names are made once per
table (in its own row order, a few seconds of Arrow), encoded as indices
into their distinct values, and each slice takes the index of its source
row. The text is what the SQL made before: a kernel's demangled name (else
its short name, else ``kernel``); ``Memcpy <kind> (<src> -> <dst>)`` and
``Memset (<kind>)`` as Kineto names copies and fills; ``CUDA graph <id>``;
a CUDA call's name without its ``_v<N>`` suffix; an NVTX event's text, else
the string its ``textId`` names, else empty.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The type a GPU's slice names are held in: an index into one dictionary of its
#: distinct names.
NAME_IDS = pa.dictionary(pa.int32(), pa.string())

_MEMCPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD (Unified)",
                12: "DtoH (Unified)", 13: "DtoD (Unified)"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}
#: A CUDA call's version suffix, dropped as Kineto shows the calls.
_VERSION_SUFFIX = r"_v[0-9]+$"


def slice_names(sources: dict[str, pa.Table], source_code: dict[str, int],
                strings: pa.Table, src: np.ndarray, src_row: np.ndarray) -> pa.ChunkedArray:
    """The name of each slice whose source is table ``src`` (a :data:`source_code`) at
    row ``src_row``, as :data:`NAME_IDS`. ``sources`` are the GPU's activity tables by
    key, ``strings`` the export's ``StringIds`` (``id, value``)."""
    dictionaries: list[pa.Array] = []
    first_row = np.zeros(max(source_code.values()) + 2, dtype=np.int64)
    indices: list[np.ndarray] = []
    names_so_far = 0
    rows_so_far = 0
    for key, code in sorted(source_code.items(), key=lambda item: item[1]):
        first_row[code] = rows_so_far
        table = sources.get(key)
        if table is None or not table.num_rows:
            continue
        encoded = pc.dictionary_encode(_source_names(key, table, strings))
        indices.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
                       + names_so_far)
        dictionaries.append(encoded.dictionary)
        names_so_far += len(encoded.dictionary)
        rows_so_far += table.num_rows
    if not src.size:
        return pa.chunked_array([], NAME_IDS)
    per_row = np.concatenate(indices)[first_row[src] + src_row]
    # The sources share names (a kernel and the NVTX range named for it): one entry each.
    distinct = pc.dictionary_encode(pa.concat_arrays(dictionaries))
    remap = distinct.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    return pa.chunked_array([pa.DictionaryArray.from_arrays(
        pa.array(remap[per_row], pa.int32()), distinct.dictionary)], NAME_IDS)


def _source_names(key: str, table: pa.Table, strings: pa.Table) -> pa.Array:
    """The name of each row of activity table ``key``, in row order (never NULL)."""
    def looked_up(column: str) -> pa.Array:
        at = pc.index_in(table[column], value_set=strings["id"].combine_chunks())
        return pc.take(strings["value"].combine_chunks(), at.combine_chunks())

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
