"""nsys-ai's views of an Nsight Systems export (``tracehouse nsys``), answered by the marts.

The figures are not computed here: the file is ingested (into a given
warehouse, else a temporary one), the marts the views read are built
(:mod:`.load`: the general ``fct_kernels`` and ``fct_annotation_ranges``
(the NVTX tree) that answer Kineto traces too, ``fct_nsys_gpu_overlap``
(``fct_rank_iterations``' span figures per GPU, without its step chain)
and ``fct_nsys_iterations`` for what only Nsight has, NVTX-marker
iterations), and each view is a query on them (:mod:`.queries`): counts and
sums grouped, interval figures read as the marts computed them (filtered
by bind parameters, never by SQL built from data); :mod:`.text` lays a
view out as aligned text and :func:`.run.nsys_view` does the three steps.
A capture window (``trim``: GPU work wholly inside [S, E] seconds of the
capture clock, as nsys and nsys-ai show it) goes through the dbt vars
``capture_window_start_ns`` / ``capture_window_end_ns``; since that
rebuilds the marts for the window, it always works in a temporary
warehouse, never in the one given.

This module stays light (no DuckDB): the command line reads ``VIEWS``
when it builds its parser.
"""

from __future__ import annotations

VIEWS = ("info", "summary", "overlap", "nccl", "iters", "tree")


class NsysViewError(Exception):
    """The file could not be loaded or the marts not built; the message says why."""


class NsysUsageError(NsysViewError):
    """The arguments ask for something the file does not hold (a GPU it lacks)."""
