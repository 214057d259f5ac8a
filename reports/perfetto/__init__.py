"""One merged Perfetto timeline of many ranks: ``tracehouse export perfetto``.

Why: a rank's own Kineto trace shows one GPU; stragglers, pipeline bubbles
and exposed communication only show when the ranks of a pipeline group or a
model replica sit on one time axis. This writes that axis from the
warehouse, so the picture uses the same classification (kind, phase,
microbatch, communication group) as every mart and chart.

What is written, per selected rank (a process track named with the rank's
coordinates from ``dim_ranks``, e.g. ``rank 5 · pp1 tp1 dp0``):

* one thread track per CPU thread holding Megatron step frames (forward,
  backward, pp_p2p, dp_sync, optimizer, nested as in the trace), from the
  mart ``fct_cpu_steps``, with the thread's name;
* one thread track per GPU stream holding its kernels, copies and fills
  from the mart ``fct_kernels``, each slice named
  ``<phase> mb<microbatch> · <kind> [group] · <short kernel name>`` (with
  ``c<vpp chunk>`` when the warehouse knows the chunk); the full kernel name
  and every classification column are kept in the slice's args.

Slices on one track must nest for Perfetto (its importers drop or truncate
partial overlaps). A kernel that partially overlaps an earlier one of its
stream (clock rounding, copies on a shared stream) therefore moves to an
extra track ``… (overlap N)`` of the same rank instead of being lost (one
that lies wholly inside another is drawn nested under it); CPU frames that
partially overlap their parent do the same. Every row becomes one slice.

Colour: Perfetto's UI colours a slice by a hash of its name unless the
event carries a ``correlation_id_str``, which it uses instead (added to the
UI in 2025); the export sets it to the kernel kind (``compute``,
``comm tp``, ``memory``) or ``cpu <phase>``, so one kind is one colour.
The Chrome JSON option sets the legacy ``cname`` instead, which
chrome://tracing honours and Perfetto ignores.

* one thread track per CPU thread holding c10d collective calls and gloo
  waits (CPU-only runs: gloo, CPU captures) from the mart
  ``fct_cpu_collectives``, each named ``c10d::<op> [group kind]``.

Clock offsets: when the warehouse has ``dim_rank_clock_offsets(run_id,
rank, offset_ns)`` with rows for the run (the distributed marts build it),
each rank's ``offset_ns`` is added to all of its times (offset = reference
clock − rank clock, the value that aligns the rank to the reference; a rank
without a row keeps its own clock). Without it, times are the traces' own
absolute nanoseconds.

Flow arrows: the members of every collective instance or P2P transfer
matched across ranks (``fct_collective_ranks``) that are in the export are
linked by one flow, in arrival order, from the first rank to arrive to the
last (the one everybody waited for): Perfetto draws the arrows between the
ranks' slices (protobuf ``flow_ids``/``terminating_flow_ids``; JSON flow
events ``s``/``t``/``f`` bound to the slices).

Scale: nothing holds a run in memory. Rows stream from DuckDB in batches
(ordered by rank, track and time; DuckDB sorts out of core within its
``memory_limit`` and spills to ``<database>.tmp``), packets are written to
the file in batches, the interning tables are reset when they grow past
:data:`INTERN_LIMIT` entries and the cache of serialized event parts is
bounded by :data:`EVENT_CACHE_LIMIT`. Measured on 2 shared cores: 1,024
ranks x 1,000 kernels (1.04 M slices) in ~31 s of CPU, 179 MB of protobuf.

Formats: ``proto`` (default; a ``Trace`` of ``TracePacket``s with
``TrackDescriptor`` and ``TrackEvent`` from the ``perfetto`` package's
protobuf definitions, event names and long arg strings interned) and
``json`` (Chrome trace-event JSON: ``X`` events, times in microseconds
since ``otherData.origin_ns`` so that a double holds them to the nanosecond,
the exact absolute ns in each event's args; strings JSON-escaped, non-ASCII
kept as UTF-8). The protobuf keeps absolute nanoseconds.

Modules: :mod:`.export` (the entry point), :mod:`.queries` (the marts'
rows as slices), :mod:`.layout` (slices on nesting tracks), the writers
:mod:`.proto_writer` and :mod:`.json_writer`, and :mod:`.slices` (the
vocabulary they share).
"""

from __future__ import annotations

from .export import FORMATS, export_perfetto
from .slices import ExportError, ExportResult

__all__ = ["FORMATS", "ExportError", "ExportResult", "export_perfetto"]
